"""Does adding a worker add throughput? Two MultiWorkerMirroredStrategy workers, each
pinned to its own core, against one process pinned to one core.

    .venv/bin/python benchmarks/worker_scaling.py [--batches 25,100,400,1600] [--rounds 2]

relVIABLE on sine (K = Q = 10, C = 5, one inner step), meta-updates per second at
each meta-batch size B. The single process runs the meta-update both as a plain
graph (what multi-worker training runs) and XLA-compiled (the single-device
default). The two workers talk over loopback (RING all-reduce of the meta-gradient,
as `make_strategy('multi_worker')` sets it up) and each computes half of the B tasks.
The ceiling for any two-process split on this machine: two independent processes (no
communication), one per core, at once, each at B / 2 (cores that share a physical
core or memory bandwidth slow each other down). Each side runs in fresh processes;
the sides alternate, `rounds` times, and the best rate of each is kept. Needs at
least 2 cores; both should be otherwise idle. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys

HERE = os.path.abspath(__file__)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(strategy_name: str, batches: list[int], jit_compile: bool) -> dict[int, float]:
    """In this (already pinned) process: meta-updates per second at each B."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from timing import relviable_sine_rate

    from viable_tf.training import make_strategy

    strategy = make_strategy(strategy_name)
    return {
        b: relviable_sine_rate(strategy, b, jit_compile=jit_compile, steps=max(20, 6_000 // b))
        for b in batches
    }


def _launch(core: int, args: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, HERE, "--_child", "--_core", str(core), *args],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _result(process: subprocess.Popen) -> dict[int, float]:
    out, err = process.communicate()
    if process.returncode:
        raise RuntimeError(f"a benchmark process failed:\n{err[-3000:]}")
    return {int(b): r for b, r in json.loads(out.strip().splitlines()[-1]).items()}


def single(batches: str, jit: bool) -> dict[int, float]:
    flag = ["--_jit"] if jit else []
    return _result(_launch(0, ["--batches", batches, "--_strategy", "default", *flag], {}))


def two_halves(batches: str) -> dict[int, float]:
    """The ceiling: two independent processes (no communication), one per core, at
    the same time, running the two workers' shares of B (13 + 12 of 25); the slower
    one's rate."""
    sizes = [int(b) for b in batches.split(",")]
    shares = [[b - b // 2 for b in sizes], [b // 2 for b in sizes]]
    pair = [
        _launch(core, ["--batches", ",".join(map(str, share)), "--_strategy", "default"], {})
        for core, share in enumerate(shares)
    ]
    first, second = (_result(p) for p in pair)
    return {
        b: min(first[big], second[small])
        for b, big, small in zip(sizes, shares[0], shares[1], strict=True)
    }


def two_workers(batches: str) -> dict[int, float]:
    cluster = {"worker": [f"127.0.0.1:{_free_port()}" for _ in range(2)]}
    workers = [
        _launch(  # worker i on core i
            i,
            ["--batches", batches, "--_strategy", "multi_worker"],
            {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})},
        )
        for i in range(2)
    ]
    results = [_result(w) for w in workers]
    return results[0]  # the chief's clock


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", default="25,100,400,1600")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--_child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--_core", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--_strategy", default="default", help=argparse.SUPPRESS)
    parser.add_argument("--_jit", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    if args._child:
        os.sched_setaffinity(0, {args._core})  # before TensorFlow sizes its thread pools
        print(json.dumps(measure(args._strategy, batches, args._jit)))
        return
    if len(os.sched_getaffinity(0)) < 2:
        parser.error("needs at least 2 cores")
    best = {"graph": {}, "xla": {}, "workers": {}, "halves": {}}
    for _ in range(args.rounds):  # alternate the sides
        for side, run in (
            ("graph", lambda: single(args.batches, False)),
            ("workers", lambda: two_workers(args.batches)),
            ("xla", lambda: single(args.batches, True)),
            ("halves", lambda: two_halves(args.batches)),
        ):
            for b, r in run().items():
                best[side][b] = max(best[side].get(b, 0.0), r)
            print(json.dumps({side: best[side]}), file=sys.stderr, flush=True)  # so far
    from timing import header

    print(header(f"relVIABLE on sine, K = Q = 10, C = 5; best of {args.rounds} alternated rounds"))
    print(
        "| meta-batch B | 1 process, 1 core, XLA | 1 process, 1 core, graph "
        "| 2 workers, 1 core each | speed-up vs 1 core (graph) | vs 1 core (XLA) "
        "| ceiling: 2 independent B/2 processes | its speed-up vs 1 core (graph) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for b in batches:
        graph, xla, two = best["graph"][b], best["xla"][b], best["workers"][b]
        ceiling = best["halves"][b]
        print(
            f"| {b} | {xla:,.1f} | {graph:,.1f} | {two:,.1f} | {two / graph:.2f}x "
            f"| {two / xla:.2f}x | {ceiling:,.1f} | {ceiling / graph:.2f}x |"
        )
    print("\n(meta-updates per second; tasks per second = B x meta-updates per second)")


if __name__ == "__main__":
    main()
