"""Where the compiled chunk's time goes: a per-thunk runtime profile of ours beside the JAX peer's.

    .venv/bin/python lab/fusion_profile.py --jax_python ../jaxenv/bin/python \
        [--peer PEER.py] [--method cavia|relviable] [--config GIN] [--steps 500] [--top 15]
        [--dump_dir DIR]

`lab/hlo_compare.py` counts what the two compilers are given; this times it. Both XLAs
run a compiled module as a sequence of thunks (a fusion, a dot, a copy, a while loop...),
and with `--xla_cpu_enable_xprof_traceme=true` each thunk leaves a TraceMe event named
after its HLO instruction in the profiler's trace. Our side: the shipped config's trainer
chunk (`Trainer.train_chunk`, as `benchmarks/meta_updates_per_second.py` runs it), one
warm-up call, then one profiled call of `steps` updates (`tf.profiler.experimental`). The
peer's side: its jitted chunk, in its own Python (read, run up to its benchmark, never
imported by the project), one warm-up call and one under `jax.profiler.trace`. Both write
an XSpace (`*.xplane.pb`), read here with TensorFlow's `xplane_pb2`.

Each thunk's *self* time (its events' durations less those of the events nested in them
on the same thread) is summed over the profiled call and divided by the updates. Each is
classed from the optimised HLO of the same compilation (both texts go to `dump_dir`): a
`dot`, or a fusion by what it computes (a matrix product, tanh, random bits, a reduction,
element-wise), a copy, the loop's control. Prints two Markdown tables: microseconds per
update by class, ours beside the peer's, and each side's `top` thunks.

The profile costs time of its own (an event per thunk), so its totals read above the
benchmark's; compare the classes, not the totals with the benchmark.
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import sys
import tempfile

from hlo_compare import (  # lab/ is the script's folder, first on sys.path
    CONFIGS,
    add_peer_arguments,
    run_peer,
)

TRACEME = "--xla_cpu_enable_xprof_traceme=true"

#: After hlo_compare.PEER_LOADER: the HLO, a warm-up call, a profiled call. The peer's
#: Python inherits XLA_FLAGS (with TRACEME) from this process's environment.
PROFILE_SNIPPET = r"""
open({hlo!r}, "w").write(chunk.lower(p, s, jax.random.PRNGKey(1)).compile().as_text())
p, s, loss = chunk(p, s, jax.random.PRNGKey(1))
loss.block_until_ready()
with jax.profiler.trace({trace!r}):
    p, s, loss = chunk(p, s, jax.random.PRNGKey(2))
    loss.block_until_ready()
print(jax.__version__)
"""

#: The peer's chunk is 3,000 meta-updates (`jax.lax.scan` over 3,000 keys).
PEER_STEPS = 3000


def peer_profile(python: str, peer: str, method: str, dump: str) -> tuple[str, str, str]:
    """Profiles the peer's chunk in its Python: (its xplane path, its HLO path, JAX's
    version)."""
    trace = os.path.join(dump, "peer_trace")
    hlo = os.path.join(dump, f"peer_{method}.hlo")
    version = run_peer(python, peer, method, PROFILE_SNIPPET.format(hlo=hlo, trace=trace))
    return _xplane(trace), hlo, version


def our_profile(name: str, steps: int, dump: str) -> tuple[str, str, str]:
    """Profiles our chunk of `steps` updates: (xplane path, HLO path, TensorFlow's
    version). XLA_FLAGS must carry TRACEME before TensorFlow is imported (main sets it)."""
    import gin
    import tensorflow as tf

    from viable_tf import config
    from viable_tf.training import Trainer

    gin.clear_config()
    config.parse([name], [f"PerformanceSpec.steps_per_call={steps}", "Trainer.show_progress=False"])
    trace = os.path.join(dump, "ours_trace")
    hlo = os.path.join(dump, "ours.hlo")
    with tempfile.TemporaryDirectory() as model_dir:
        trainer = Trainer(model_dir=model_dir)
        with open(hlo, "w") as f:
            f.write(
                trainer.train_chunk.experimental_get_compiler_ir(tf.constant(steps))(
                    stage="optimized_hlo"
                )
            )
        int(trainer.train_chunk(tf.constant(steps))[0])  # compile, warm up
        tf.profiler.experimental.start(trace)
        ran = int(trainer.train_chunk(tf.constant(steps))[0])
        tf.profiler.experimental.stop()
    if ran != steps:
        sys.exit(f"the chunk ran {ran} of {steps} updates")
    return _xplane(trace), hlo, tf.__version__


def _xplane(trace_dir: str) -> str:
    found = sorted(glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True))
    if not found:
        sys.exit(f"no *.xplane.pb under {trace_dir}: was the profiler able to write?")
    return found[-1]


def self_times(xplane_path: str) -> dict[str, float]:
    """Seconds of self time per event name on the host plane, summed over its threads.

    Events on one thread nest (a while loop's event holds its body's thunks); an event's
    self time is its duration less its direct children's. "end: X" markers are dropped."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with open(xplane_path, "rb") as f:
        space.ParseFromString(f.read())
    totals: collections.Counter = collections.Counter()
    for plane in space.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        for line in plane.lines:
            names = plane.event_metadata
            events = sorted(
                ((e.offset_ps, e.duration_ps, names[e.metadata_id].name) for e in line.events),
                key=lambda e: (e[0], -e[1]),
            )
            stack: list[list] = []  # [end_ps, name, self_ps]
            for start, duration, name in events:
                if name.startswith("end: "):
                    continue
                while stack and stack[-1][0] <= start:
                    _, done, own = stack.pop()
                    totals[done] += own
                if stack:
                    stack[-1][2] -= duration
                stack.append([start + duration, name, duration])
            for _, done, own in stack:
                totals[done] += own
    return {name: ps * 1e-12 for name, ps in totals.items()}


#: An instruction line of HLO text: `name = shape opcode(operands), attributes`.
INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+) = (?P<shape>.+?) (?P<op>[a-z][\w\-]*)\((?P<rest>.*)$"
)
COMPUTATION = re.compile(r"^\s*(?:ENTRY\s+)?%?(?P<name>[\w.\-]+) .*\{\s*$")


def hlo_instructions(text: str) -> tuple[dict, dict]:
    """(instruction name -> (opcode, shape, called computation or None),
    computation name -> its opcodes)."""
    instructions, computations = {}, collections.defaultdict(list)
    current = None
    for line in text.splitlines():
        match = INSTRUCTION.match(line)
        if match:
            called = re.search(r"calls=%?([\w.\-]+)", match["rest"])
            instructions[match["name"]] = (match["op"], match["shape"], called and called[1])
            if current:
                computations[current].append(match["op"])
            continue
        comp = COMPUTATION.match(line)
        if comp and "=" not in line.split("{")[0]:
            current = comp["name"]
    return instructions, computations


#: Opcodes of the random-bit generators (Philox, threefry): integer mixing.
RANDOM_OPS = {"xor", "shift-right-logical", "shift-left"}


def classify(name: str, instructions: dict, computations: dict) -> str:
    """A thunk's class, from its HLO instruction."""
    if name not in instructions:
        return "runtime (not an HLO instruction)"
    op, _, called = instructions[name]
    if op == "fusion" or op == "custom-call":
        ops = set(computations.get(called, ())) if called else set()
        if "dot" in ops or "convolution" in ops or (op == "custom-call" and not ops):
            return "matrix products (fused)"
        if ops & RANDOM_OPS:
            return "random bits"
        if "tanh" in ops:
            return "tanh (fused)"
        if "reduce" in ops or "reduce-window" in ops:
            return "reductions (fused)"
        return "element-wise (fused)"
    if op == "dot":
        return "matrix products"
    if op in ("copy", "copy-start", "copy-done", "transpose"):
        return "copies"
    if op in ("while", "conditional", "call"):
        return "control flow (self time)"
    if op in ("reduce", "reduce-window"):
        return "reductions"
    return f"other: {op}"


def classes(times: dict, hlo_path: str, steps: int) -> tuple[dict, list]:
    """(class -> microseconds per update, [(us per update, thunk, class)] sorted)."""
    with open(hlo_path) as f:
        instructions, computations = hlo_instructions(f.read())
    by_class: collections.Counter = collections.Counter()
    thunks = []
    for name, seconds in times.items():
        if name not in instructions:  # the framework's own events (Python, executors)
            continue
        label = classify(name, instructions, computations)
        micros = seconds / steps * 1e6
        by_class[label] += micros
        thunks.append((micros, name, label, instructions[name][1]))
    return dict(by_class), sorted(thunks, reverse=True)


def class_table(ours: dict, peer: dict) -> str:
    lines = ["| per meta-update (us) | ours | peer | ours - peer |", "|---|---:|---:|---:|"]
    for label in sorted(set(ours) | set(peer), key=lambda k: -(ours.get(k, 0) + peer.get(k, 0))):
        a, b = ours.get(label, 0.0), peer.get(label, 0.0)
        lines.append(f"| {label} | {a:.1f} | {b:.1f} | {a - b:+.1f} |")
    a, b = sum(ours.values()), sum(peer.values())
    lines.append(f"| **all thunks** | **{a:.1f}** | **{b:.1f}** | **{a - b:+.1f}** |")
    return "\n".join(lines)


def top_table(side: str, thunks: list, top: int) -> str:
    lines = [f"| {side}: thunk | class | shape | us / update |", "|---|---|---|---:|"]
    for micros, name, label, shape in thunks[:top]:
        shape = shape if len(shape) < 60 else shape[:57] + "..."
        lines.append(f"| `{name}` | {label} | `{shape}` | {micros:.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_peer_arguments(parser, method="relviable")
    parser.add_argument(
        "--config", default=None, help="our gin config (default: the peer's architecture)"
    )
    parser.add_argument("--steps", type=int, default=500, help="updates in our profiled call")
    parser.add_argument("--top", type=int, default=15, help="thunks listed per side")
    parser.add_argument("--dump_dir", default=None, help="where the traces and HLO go")
    args = parser.parse_args()
    if args.steps < 1:
        parser.error("--steps must be positive")
    dump = args.dump_dir or tempfile.mkdtemp(prefix="fusion-profile-")
    os.makedirs(dump, exist_ok=True)
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + TRACEME).strip()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

    peer_xplane, peer_hlo, jax_version = peer_profile(args.jax_python, args.peer, args.method, dump)
    name = args.config or CONFIGS[args.method]
    ours_xplane, ours_hlo, tf_version = our_profile(name, args.steps, dump)
    ours_classes, ours_thunks = classes(self_times(ours_xplane), ours_hlo, args.steps)
    peer_classes, peer_thunks = classes(self_times(peer_xplane), peer_hlo, PEER_STEPS)
    print(
        f"{name} (TensorFlow {tf_version}, {args.steps} updates profiled) vs "
        f"{os.path.basename(args.peer)} {args.method} (JAX {jax_version}, {PEER_STEPS}); "
        f"traces and HLO in {dump}\n"
    )
    print(class_table(ours_classes, peer_classes) + "\n")
    print(top_table("ours", ours_thunks, args.top) + "\n")
    print(top_table("peer", peer_thunks, args.top))


if __name__ == "__main__":
    main()
