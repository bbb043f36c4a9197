"""Meta-updates per second of each learner on sine, on this machine.

    .venv/bin/python benchmarks/meta_updates_per_second.py [--steps 3000] [--repeats 3]
    .venv/bin/python benchmarks/meta_updates_per_second.py --configs sine/cavia.gin,sine/maml.gin
    .venv/bin/python benchmarks/meta_updates_per_second.py --steps 500 --rounds 2 \
        --configs omniglot/cavia_5way1shot.gin,omniglot/cavia_proto_5way1shot.gin \
        --gin_param "DATA_DIR='runs/omniglot/features'" --gin_param META_BATCH_SIZE=4
    .venv/bin/python benchmarks/meta_updates_per_second.py --steps 10 --rounds 2 \
        --configs sine/metal_cavia.gin,sine/metal_cavia.gin+MeTAL.query_term=False

Setting of the issue: B = 25 tasks, K = Q = 10, C = 5, one inner step, second
order; the trainer's own compiled step function (a chunk of meta-updates per
call, Adam, clipping), so the figure is what training gets. Prints a Markdown
table; the best of `repeats` timed chunks is reported, after a warm-up chunk
that also compiles. With `--configs`, each learner is built from a shipped gin config
exactly as viable-train builds it (its activation, init and XLA setting), and the
table gives the time per meta-update beside the first config's, and the slowest chunk
beside the fastest (the sitting's spread). A config named `file.gin+Binding=value+...`
is that file with those bindings on top, so an ablation is timed in the same sitting as
the config it ablates.
"""

from __future__ import annotations

import argparse
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import gin
from timing import chunk_rate, chunk_rates, header

from viable_tf import config
from viable_tf.learners import CAVIA, MAML, VIABLE
from viable_tf.networks import RelationLossNetwork, SimpleLossNetwork
from viable_tf.tasks import SineTasks
from viable_tf.training import PerformanceSpec, Trainer

LEARNERS = {
    "CAVIA": lambda **kw: CAVIA(context_dim=5, **kw),
    "simVIABLE": lambda **kw: VIABLE(context_dim=5, loss_network=SimpleLossNetwork, **kw),
    "relVIABLE": lambda **kw: VIABLE(context_dim=5, loss_network=RelationLossNetwork, **kw),
    "MAML": lambda **kw: MAML(context_dim=0, inner_lr=0.1, **kw),
}


def measure(make_learner, *, steps: int, repeats: int, jit_compile: bool) -> float:
    with tempfile.TemporaryDirectory() as model_dir:
        trainer = Trainer(
            model_dir=model_dir,
            tasks=SineTasks(num_support=10, num_query=10),
            learner=make_learner,
            meta_batch_size=25,
            performance=PerformanceSpec(steps_per_call=steps, jit_compile=jit_compile),
            show_progress=False,
        )
        return chunk_rate(trainer, steps=steps, repeats=repeats)


def measure_config(name: str, *, steps: int, repeats: int, params=()) -> list[float]:
    """The rates of a shipped config's trainer's chunks, built by gin as viable-train
    builds it."""
    gin.clear_config()
    config.parse(
        [name], ["Trainer.show_progress=False", f"PerformanceSpec.steps_per_call={steps}", *params]
    )
    with tempfile.TemporaryDirectory() as model_dir:
        return chunk_rates(Trainer(model_dir=model_dir), steps=steps, repeats=repeats)


def variants(configs: str) -> list[tuple[str, tuple[str, ...]]]:
    """`--configs`' entries as (gin file, its own bindings): 'a.gin,b.gin+X.y=1' gives
    [('a.gin', ()), ('b.gin', ('X.y=1',))]."""
    return [
        (name, tuple(bindings)) for name, *bindings in (c.split("+") for c in configs.split(","))
    ]


def rate_text(rate: float) -> str:
    """Three significant figures below 100 updates a second, whole numbers above."""
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=3000, help="meta-updates per timed chunk")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--configs", default=None, help="comma-separated shipped gin configs")
    parser.add_argument("--gin_param", action="append", default=[], help="for every config")
    parser.add_argument("--rounds", type=int, default=1, help="the configs in turn, N times")
    args = parser.parse_args()
    if args.configs:
        print(header())
        print(
            "| round | config | meta-updates/s (best) | slowest-fastest chunk "
            "| ms / meta-update | time vs the first |"
        )
        print("|---:|---|---:|---:|---:|---:|")
        for round_ in range(1, args.rounds + 1):
            first = None
            for name, bindings in variants(args.configs):
                rates = measure_config(
                    name,
                    steps=args.steps,
                    repeats=args.repeats,
                    params=[*args.gin_param, *bindings],
                )
                rate = max(rates)
                first = first or rate
                label = "+".join((name, *bindings))
                print(
                    f"| {round_} | {label} | {rate_text(rate)} "
                    f"| {rate_text(min(rates))}-{rate_text(rate)} "
                    f"| {1e3 / rate:.2f} | {first / rate:.2f} |",
                    flush=True,
                )
        return
    print(header("B=25, K=Q=10, C=5, 1 inner step, second order"))
    print("| learner | meta-updates/s (XLA) | meta-updates/s (no XLA) |")
    print("|---|---:|---:|")
    for name, make in LEARNERS.items():
        xla = measure(make, steps=args.steps, repeats=args.repeats, jit_compile=True)
        plain = measure(make, steps=args.steps, repeats=args.repeats, jit_compile=False)
        print(f"| {name} | {xla:,.0f} | {plain:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
