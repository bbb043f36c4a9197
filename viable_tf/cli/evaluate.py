"""viable-eval: re-evaluate a trained run's best checkpoint on the fixed test tasks.

    viable-eval --model_dir=D [--num_support=K[,K...]] [--gin_param=...]

Prints the results JSON and writes it to D/eval_k<K>.json, for each K asked for.
"""

from __future__ import annotations

import argparse
import json

from viable_tf.cli.common import UsageError, run_main
from viable_tf.logs import add_verbosity_flag


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="viable-eval", description=__doc__.split("\n")[0])
    add_verbosity_flag(parser)
    parser.add_argument("--model_dir", required=True, help="a directory written by viable-train")
    parser.add_argument(
        "--num_support", default=None, help="K to adapt on, or several: 0,1,2 (default: trained K)"
    )
    parser.add_argument("--gin_param", action="append", default=[], help="gin binding")
    return parser


def _main() -> int:
    args = _parser().parse_args()
    shots: list[int | None] = [None]
    if args.num_support is not None:
        try:
            shots = [int(k) for k in args.num_support.split(",")]
        except ValueError:
            raise UsageError(
                "--num_support must be an integer K or a list like 0,1,20; "
                f"got {args.num_support!r}"
            ) from None
        if any(k < 0 for k in shots):
            raise UsageError(f"--num_support must be >= 0, got {args.num_support}")
    from viable_tf.config import load_run
    from viable_tf.training.experiment import evaluate_and_write

    run = load_run(args.model_dir, tuple(args.gin_param))
    for k in shots:
        print(json.dumps(evaluate_and_write(run, num_support=k), indent=2))
    return 0


def main() -> None:
    run_main(_main, "viable-eval")


if __name__ == "__main__":
    main()
