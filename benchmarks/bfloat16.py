"""Meta-updates per second in float32 and in bfloat16 (PerformanceSpec.precision) on
Omniglot images end to end, alternated in one sitting.

    .venv/bin/python benchmarks/bfloat16.py --data_dir=../shared/data/omniglot \\
        [--methods=protonet,cavia,simviable,maml,maml_simviable] \\
        [--settings=5way1shot,20way1shot] [--steps=20] [--rounds=2]

Each method and setting is built from gin/omniglot_conv/ as viable-train builds it (the
trainer's compiled chunk: sampling, two second-order inner steps where the method has
them, Adam), once in float32 and once with gin/precision/bfloat16.gin (forced, so that
the table measures bfloat16 even on a CPU without it natively). Within a round the two
formats run in turn, the first of the pair alternating between rounds and cells; each cell is the
best chunk of its rounds. The header names the CPU's bfloat16 flags (avx512_bf16,
amx_bf16): a CPU without them emulates bfloat16 and is expected to lose.
"""

from __future__ import annotations

import argparse
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from timing import chunk_rates, header, image_trainer

from viable_tf import hardware, precision

METHODS = ("protonet", "cavia", "simviable", "maml", "maml_simviable")
SETTINGS = ("5way1shot", "20way1shot")
FORMATS = ("float32", "bfloat16")


def rates(method: str, setting: str, number_format: str, data_dir: str, steps: int) -> list:
    """Meta-updates per second of 3 chunks of `steps`, after a warm-up chunk."""
    with tempfile.TemporaryDirectory() as model_dir:
        trainer = image_trainer(
            method, setting, data_dir, model_dir,
            steps_per_call=steps, precision=number_format, force_precision=True,
        )  # fmt: skip
        return chunk_rates(trainer, steps=steps, repeats=3, warmup_steps=2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data_dir", required=True, help="Omniglot's zips")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--steps", type=int, default=20, help="meta-updates per timed chunk")
    parser.add_argument("--rounds", type=int, default=2, help="each pair of formats, N times")
    args = parser.parse_args()
    data_dir = os.path.abspath(args.data_dir)
    flags = [f for f in precision.NATIVE_FLAGS if f in hardware.cpu_flags()]
    native = ", ".join(flags) if flags else "none (bfloat16 emulated)"
    print(header(f"native bfloat16 flags: {native}; B = 4, end to end on 28 x 28 images"))
    print(
        "| method | setting | float32 meta-updates/s | bfloat16 meta-updates/s "
        "| bfloat16 / float32 | slowest-fastest chunk (f32; bf16) |"
    )
    print("|---|---|---:|---:|---:|---|")
    cells = [(s, m) for s in args.settings.split(",") for m in args.methods.split(",")]
    for index, (setting, method) in enumerate(cells):
        measured = {f: [] for f in FORMATS}
        for round_ in range(args.rounds):
            order = FORMATS if (round_ + index) % 2 == 0 else FORMATS[::-1]
            for number_format in order:
                measured[number_format] += rates(
                    method, setting, number_format, data_dir, args.steps
                )
        full, half = max(measured["float32"]), max(measured["bfloat16"])
        spread = "; ".join(f"{min(measured[f]):.2f}-{max(measured[f]):.2f}" for f in FORMATS)
        print(
            f"| {method} | {setting} | {full:.2f} | {half:.2f} | {half / full:.2f}x | {spread} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
