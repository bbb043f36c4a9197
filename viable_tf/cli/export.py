"""viable-export: write a trained run as a SavedModel version for TF Serving.

    viable-export --model_dir=D --export_base=BASE [--version=N] [--without_query_term]

Writes BASE/<N>/ (N defaults to one more than the highest version present) with
the best checkpoint's weights, and assets.extra/ holding the operative gin config,
the method and its evaluation result (viable_model.json) and warm-up requests.

`--without_query_term`, for a learner whose inner loss reads the request's query points
(MeTAL's query term): the export adapts on the support set alone, with the trained
weights and support term, so that a query's answer does not depend on the other queries
sent with it, as a server answering one image at a time needs (docs/metal.md).
"""

from __future__ import annotations

import argparse
import os

from viable_tf.cli.common import UsageError, run_main, tool_command
from viable_tf.logs import add_verbosity_flag


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="viable-export", description=__doc__.split("\n")[0])
    add_verbosity_flag(parser)
    parser.add_argument("--model_dir", required=True, help="a directory written by viable-train")
    parser.add_argument("--export_base", required=True, help="the model's base path for serving")
    parser.add_argument("--version", type=int, default=None, help="version number (default: next)")
    parser.add_argument(
        "--model_name",
        default=None,
        help="the name it is served under, in its warm-up requests and the printed serve "
        "command (default: the name of --export_base's folder)",
    )
    parser.add_argument(
        "--without_query_term",
        action="store_true",
        help="adapt on the support set alone: a learner with a query term (MeTAL's) is "
        "exported without it, so that each query's answer is its own",
    )
    return parser


def _main() -> int:
    args = _parser().parse_args()
    if args.version is not None and args.version < 1:
        raise UsageError(f"--version must be >= 1, got {args.version}")
    target = os.path.join(args.export_base, str(args.version))
    if args.version is not None and os.path.exists(target):
        raise UsageError(f"{target} exists; pick another --version or omit it for the next one")
    from viable_tf.config import load_run
    from viable_tf.export import export_saved_model
    from viable_tf.learners.metal import TaskAdaptiveInnerLoss

    model_name = args.model_name or os.path.basename(os.path.abspath(args.export_base))
    # With --without_query_term the learner as trained is only looked at, not restored.
    run = load_run(args.model_dir, restore=not args.without_query_term)
    results = run.run_dir.read_results() if os.path.exists(run.run_dir.results) else {}
    with open(run.run_dir.operative_config) as f:
        config = f.read()
    trained_as = {}
    if args.without_query_term:
        if not (isinstance(run.learner, TaskAdaptiveInnerLoss) and run.learner.query_term):
            raise UsageError(
                f"--without_query_term: {run.learner.method_name} has no query term to leave "
                "out (its adaptation reads the support set alone)"
            )
        trained_as = {
            "trained_as": {
                "method": run.learner.method_name,
                "left_out": "the query term: the evaluation is of the learner as trained, with it",
            }
        }
        run = load_run(args.model_dir, learner_options={"query_term": False})
        config += "\n# Exported with --without_query_term: the learner above, query_term=False.\n"
    metadata = {"evaluation": results, "checkpoint_step": run.checkpoint_step, **trained_as}
    # Images, for a run on a folder of images: its raw_inputs() give the learner's inputs
    # exactly as training took them, so they are not l2-normalised (as features are).
    raw = run.tasks.raw_inputs()
    featurizer, input_shape = raw if raw is not None else (None, None)
    path = export_saved_model(
        run.learner,
        args.export_base,
        version=args.version,
        operative_config=config,
        metadata=metadata,
        model_name=model_name,
        warmup_inputs=run.tasks.warmup_inputs if raw is None else None,
        featurizer=featurizer,
        input_shape=input_shape,
        normalize=False,
    )
    print(f"exported {run.learner.method_name} to {path}")
    print(
        f"serve it: {tool_command('viable-serve')} --model_name={model_name} "
        f"--model_base_path={os.path.abspath(args.export_base)}"
    )
    return 0


def main() -> None:
    run_main(_main, "viable-export")


if __name__ == "__main__":
    main()
