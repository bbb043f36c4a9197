"""What XLA is given: our compiled chunk's optimised HLO beside the JAX peer's, counted.

    .venv/bin/python lab/hlo_compare.py --jax_python ../jaxenv/bin/python \
        [--peer ../shared/peers/jax_cavia.py] [--method cavia|relviable] [--config GIN]
        [--dump_dir DIR]

Our side: the shipped sine config (`sine/cavia.gin`, or `sine/relviable_relu.gin`, the
peer's architecture), the trainer's chunk (`Trainer.train_chunk`) as XLA optimises it
(`experimental_get_compiler_ir(...)(stage="optimized_hlo")`). The peer's side: its jitted
3,000-update `chunk`, lowered and compiled (`jax.jit(...).lower(...).compile().as_text()`),
in the peer's own environment (a second Python with jax and optax; the peer is read, run up
to its benchmark, and never imported by the project). Both texts are written to `dump_dir`
and counted: instructions by opcode, fusions by kind, the computations, the while loops and
the size of what each carries from one iteration to the next. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

#: An HLO instruction line: `name = shape opcode(operands), attributes`.
INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+ = (?P<shape>.+?) (?P<op>[a-z][\w\-]*)\(")


def hlo_counts(text: str) -> dict:
    """Counts of one optimised HLO module's text."""
    ops: collections.Counter = collections.Counter()
    fusion_kinds: collections.Counter = collections.Counter()
    carries = []
    computations = 0
    for line in text.splitlines():
        if re.match(r"^\s*(ENTRY\s+)?%?[\w.\-]+ .*\{\s*$", line) and "=" not in line.split("{")[0]:
            computations += 1
        match = INSTRUCTION.match(line)
        if not match:
            continue
        op = match["op"]
        ops[op] += 1
        if op == "fusion":
            kind = re.search(r"kind=(k\w+)", line)
            fusion_kinds[kind[1] if kind else "?"] += 1
        if op == "while":  # what the loop carries: the elements of its tuple shape
            carries.append(
                len(re.findall(r"(?:f32|f64|s32|u32|s64|u64|pred|bf16|f16|u8)\[", match["shape"]))
            )
    return {
        "instructions": sum(ops.values()),
        "computations": computations,
        "ops": dict(ops),
        "fusions": dict(fusion_kinds),
        "while_carries": carries,
    }


#: Loads the peer's definitions in its own Python (run up to its benchmark, never imported
#: by the project) and its starting point; a snippet after it uses `jax`, `chunk`, `p`, `s`.
PEER_LOADER = r"""
import sys
sys.argv = ["peer", {method!r}]
source = open({peer!r}).read()
source = source[: source.index("\np = init(")]  # the definitions, not the benchmark
namespace = {{"__name__": "peer"}}
exec(compile(source, {peer!r}, "exec"), namespace)
jax = namespace["jax"]
chunk = namespace["chunk"]
p = namespace["init"](jax.random.PRNGKey(0))
s = namespace["opt"].init(p)
"""

HLO_SNIPPET = r"""
open({out!r}, "w").write(chunk.lower(p, s, jax.random.PRNGKey(1)).compile().as_text())
print(jax.__version__)
"""


def run_peer(python: str, peer: str, method: str, snippet: str) -> str:
    """Runs `snippet` after PEER_LOADER in the peer's Python; what it printed."""
    code = PEER_LOADER.format(method=method, peer=os.path.abspath(peer)) + snippet
    result = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
    if result.returncode:
        sys.exit(f"the peer's side failed: {result.stderr.strip().splitlines()[-1:]}")
    return result.stdout.strip()


def jax_hlo(python: str, peer: str, method: str, out: str) -> str:
    """Writes the peer's optimised HLO to `out`; its JAX version."""
    return run_peer(python, peer, method, HLO_SNIPPET.format(out=out))


def add_peer_arguments(parser: argparse.ArgumentParser, *, method: str) -> None:
    """The options both tools take: the peer's Python, the peer, the method compared."""
    parser.add_argument("--jax_python", required=True, help="a Python with jax and optax")
    parser.add_argument(
        "--peer", default=os.path.join(REPO, "..", "shared", "peers", "jax_cavia.py")
    )
    parser.add_argument("--method", default=method, choices=tuple(CONFIGS))


#: Our config for each of the peer's methods: the peer's architecture.
CONFIGS = {"cavia": "sine/cavia.gin", "relviable": "sine/relviable_relu.gin"}


def our_hlo(name: str, out: str) -> str:
    """Writes our chunk's optimised HLO to `out`; TensorFlow's version."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import gin
    import tensorflow as tf

    from viable_tf import config
    from viable_tf.training import Trainer

    gin.clear_config()
    config.parse([name], ["PerformanceSpec.steps_per_call=3000", "Trainer.show_progress=False"])
    with tempfile.TemporaryDirectory() as model_dir:
        trainer = Trainer(model_dir=model_dir)
        text = trainer.train_chunk.experimental_get_compiler_ir(tf.constant(3000))(
            stage="optimized_hlo"
        )
    with open(out, "w") as f:
        f.write(text)
    return tf.__version__


def table(ours: dict, peer: dict) -> str:
    rows = [
        ("instructions", ours["instructions"], peer["instructions"]),
        ("computations", ours["computations"], peer["computations"]),
        ("while loops (values carried)", _loops(ours), _loops(peer)),
    ]
    rows += [
        (f"fusions, {kind}", ours["fusions"].get(kind, 0), peer["fusions"].get(kind, 0))
        for kind in sorted(set(ours["fusions"]) | set(peer["fusions"]))
    ]
    opcodes = sorted(
        set(ours["ops"]) | set(peer["ops"]),
        key=lambda op: -(ours["ops"].get(op, 0) + peer["ops"].get(op, 0)),
    )
    rows += [(op, ours["ops"].get(op, 0), peer["ops"].get(op, 0)) for op in opcodes]
    lines = ["| | ours (TensorFlow) | peer (JAX) |", "|---|---:|---:|"]
    lines += [f"| {name} | {a} | {b} |" for name, a, b in rows]
    return "\n".join(lines)


def _loops(counts: dict) -> str:
    carries = counts["while_carries"]
    return f"{len(carries)} ({', '.join(map(str, carries))})" if carries else "0"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_peer_arguments(parser, method="cavia")
    parser.add_argument("--config", default=None, help="our gin config (default: CONFIGS)")
    parser.add_argument("--dump_dir", default=None, help="where the two HLO texts are written")
    args = parser.parse_args()
    dump = args.dump_dir or tempfile.mkdtemp(prefix="hlo-")
    os.makedirs(dump, exist_ok=True)
    ours_path = os.path.join(dump, f"ours_{args.method}.hlo")
    peer_path = os.path.join(dump, f"peer_{args.method}.hlo")
    jax_version = jax_hlo(args.jax_python, args.peer, args.method, peer_path)
    ours_name = args.config or CONFIGS[args.method]
    tf_version = our_hlo(ours_name, ours_path)
    with open(ours_path) as f:
        ours = hlo_counts(f.read())
    with open(peer_path) as f:
        peer = hlo_counts(f.read())
    print(
        f"{ours_name} (TensorFlow {tf_version}) vs {os.path.basename(args.peer)} {args.method} "
        f"(JAX {jax_version}); HLO in {dump}\n"
    )
    print(table(ours, peer))
    with open(os.path.join(dump, f"counts_{args.method}.json"), "w") as f:
        json.dump({"ours": ours, "peer": peer}, f, indent=1)


if __name__ == "__main__":
    main()
