"""Omniglot end to end (docs/method.md §9): a conv net whose context enters through FiLM, trained
by CAVIA, simVIABLE, relVIABLE and MAML directly on the 28 x 28 images, beside a
Prototypical Network on the same conv, on the alphabet split of the frozen-feature
pipeline (viable-omniglot), every run to convergence by early stopping
(gin/omniglot_conv/conv.gin). The images are read by the image-folder task family
(viable_tf/tasks/images.py, gin/omniglot_conv/episodes.gin): Omniglot's zips are one
folder of images among others.

    python -m viable_tf.experiments.omniglot_conv --data_dir=../shared/data/omniglot \\
        --work_dir=W [--methods=cavia,simviable] [--settings=5way1shot]

Beyond the five methods run by default, --methods takes cavia_proto and simviable_proto
(the prototype head under CAVIA's and simVIABLE's inner steps), maml_simviable,
relviable_leaky, cavia_stepped, simviable_stepped and relviable_stepped (the output layer
stepped per task, beyond the paper: gin/omniglot_conv/stepped.gin), and the paper's
comparators: metasgd_cavia, metasgd_maml and metasgd_simviable (Meta-SGD's learned step
sizes), matching and matching_fce (Matching Networks), r2d2 and metaoptnet_svm
(MetaOptNet's solved output layers).

Rerunning the command resumes every unfinished run from its last checkpoint (several
invocations with disjoint --methods or --settings can run at once, one per core).

Stages, each skipped when its output exists:
  1. train    each method x setting from gin/omniglot_conv/ (PerformanceSpec.jit_compile=False)
              on the zips in --data_dir (IMAGE_DIR): W/runs/<method>_<N>way<K>shot/results.json
  2. sweep    the 5-shot models tested at 1..9 shots: W/runs/*_5way5shot/eval_k<K>.json
  3. export   each run as a served version that takes the drawings as read (float32
              [B, K, 105, 105, 1], 0..1) or as PNG files (serving_png), with 40 example
              drawings of the test alphabets and their licence in assets.extra/examples/:
              W/export/<run>/<version>/ (serve it: viable-serve --model_base_path=...);
              W/results.json names the best on validation per setting ("served")
Then W/results.json and W/results.md: every finished run of W/runs (whichever invocation
trained it), with the time per meta-update of each run and the nearest class mean of the
pixels on the same test episodes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from viable_tf.cli.common import UsageError, run_main
from viable_tf.experiments import class_means, omniglot
from viable_tf.logs import add_verbosity_flag
from viable_tf.run_dir import RunDir

CONFIGS = "omniglot_conv"
METHODS = ("cavia", "simviable", "relviable", "maml", "protonet")
#: Beyond the table's five, where the time allows (docs/method.md §9): the prototype head under
#: CAVIA and simVIABLE, simVIABLE on MAML, relVIABLE with a leaky-ReLU pair network, and
#: the output layer stepped per task (beyond the paper); run when named in --methods.
MORE_METHODS = (
    "cavia_proto",
    "simviable_proto",
    "maml_simviable",
    "relviable_leaky",
    "cavia_stepped",
    "simviable_stepped",
    "relviable_stepped",
    # The paper's comparators on the same conv net and episodes.
    "metasgd_cavia",
    "metasgd_maml",
    "metasgd_simviable",
    "matching",
    "matching_fce",
    "r2d2",
    "metaoptnet_svm",
    # Variants the results pages show: the learned loss as a correction to the task loss
    # (residual), relVIABLE's 2 x 64 tanh pair network, and the comparators' options.
    "relviable_tanh64",
    "relviable_tanh64_residual",
    "simviable_residual",
    "matching_tau",
    "matching_fce_tau",
    "metaoptnet_svm_normalized",
    # MeTAL, the task-adaptive learned loss (docs/method.md §11), on MAML and on CAVIA,
    # beyond both (relmetal_cavia: its terms over pairs), and on MAML with MeTAL's own 5
    # inner steps (metal_maml_steps5); the last two at 5way1shot only.
    "metal_maml",
    "metal_cavia",
    "relmetal_cavia",
    "metal_maml_steps5",
)
SETTINGS = ("5way1shot", "5way5shot", "20way1shot")


def data(data_dir: str) -> tuple[str, ...]:
    """The gin binding that points the configs at Omniglot's zips (IMAGE_DIR), as an
    absolute path: the runs' commands may start elsewhere."""
    return (f"IMAGE_DIR={os.path.abspath(data_dir)!r}",)


def export(work_dir: str, data_dir: str, run: str) -> str:
    """Stage 3 for one run: `omniglot.export` behind the pixels' preprocessing (the
    drawings resized to 28 x 28 and inverted, as the episodes read them; not
    l2-normalised, as they are not in training), with the example drawings (written
    once to W/examples/)."""
    from viable_tf.datasets import omniglot as images
    from viable_tf.networks import omniglot_encoder

    examples = os.path.join(work_dir, "examples")
    if not os.path.isfile(os.path.join(examples, "index.json")):
        images.write_examples(data_dir, examples)
    return omniglot.export(
        work_dir,
        run,
        featurizer=omniglot_encoder.pixel_featurizer(),
        normalize=False,
        examples=examples,
        data=data(data_dir),
    )


def finished_runs(work_dir: str, methods: tuple[str, ...], settings: tuple[str, ...]) -> dict:
    """Every run of `methods` x `settings` under W/runs that has its results, as
    {run: results} with the 1..9-shot sweep ("by_shots") of a 5-way 5-shot run once it is
    complete: the runs of one work directory make one table, however many invocations
    (one per core) trained them."""
    runs = {}
    for setting in settings:
        for method in methods:
            run = f"{method}_{setting}"
            run_dir = RunDir(os.path.join(work_dir, "runs", run))
            if not os.path.exists(run_dir.results):
                continue
            record = run_dir.read_results()
            swept = [run_dir.evaluation(k) for k in omniglot.SWEEP_SHOTS]
            if setting == "5way5shot" and all(os.path.exists(path) for path in swept):
                record["by_shots"] = {
                    str(k): omniglot.read_json(p)
                    for k, p in zip(omniglot.SWEEP_SHOTS, swept, strict=True)
                }
            runs[run] = record
    return runs


def report(summary: dict) -> str:
    text = omniglot.report(summary).replace(
        "### Omniglot test accuracy", "### Omniglot end to end (conv + FiLM), test accuracy"
    )
    lines = ["", "### Runs: updates used and training wall-clock (across resumptions)", ""]
    lines.append(
        "| run | meta-updates | best at | stopped early | training wall-clock | s per update |"
    )
    lines.append("|---|---:|---:|---|---:|---:|")
    for name, record in summary["runs"].items():
        seconds = record.get("train_wall_clock_seconds", record["train_and_eval_seconds"])
        steps = record["steps_trained"]
        early = "yes" if steps < record["hparams"]["num_steps"] else "no: hit the cap"
        lines.append(
            f"| {name} | {steps} | {record['checkpoint_step']} | {early} "
            f"| {seconds / 3600:.2f} h | {seconds / steps:.3f} |"
        )
    return text + "\n".join(lines) + "\n"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_verbosity_flag(parser)
    parser.add_argument("--data_dir", default=omniglot.DEFAULT_DATA_DIR)
    parser.add_argument("--work_dir", required=True)
    parser.add_argument(
        "--methods", default=",".join(METHODS), help="of " + ",".join(METHODS + MORE_METHODS)
    )
    parser.add_argument("--settings", default=",".join(SETTINGS), help="of " + ",".join(SETTINGS))
    # Each unset: the configs' value (conv.gin).
    for flag in FLAG_BINDINGS:
        parser.add_argument(f"--{flag}", type=int, default=None)
    parser.add_argument("--gin_param", action="append", default=[])
    parser.add_argument(
        "--reference_only",
        action="store_true",
        help="train nothing: the nearest class mean of the pixels on the test episodes of "
        "--settings, in W/reference.json",
    )
    return parser


#: The driver's flags and the gin bindings they set.
FLAG_BINDINGS = {
    "num_steps": "NUM_STEPS",
    "meta_batch_size": "META_BATCH_SIZE",
    "eval_every": "EvaluationSpec.eval_every",
    "patience": "EvaluationSpec.patience",
    "validation_episodes": "classification_validation_evaluator.num_episodes",
    "test_episodes": "classification_test_evaluator.num_episodes",
}


def run_params(args: argparse.Namespace) -> list[str]:
    """The gin bindings of the flags given; the configs' values for the rest."""
    given = {flag: getattr(args, flag) for flag in FLAG_BINDINGS if getattr(args, flag)}
    return [f"{FLAG_BINDINGS[flag]}={value}" for flag, value in given.items()] + args.gin_param


def _main() -> int:
    args = _parser().parse_args()
    for flag in FLAG_BINDINGS:
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            raise UsageError(f"--{flag} must be >= 1, got {getattr(args, flag)}")
    methods = omniglot.parse_names("--methods", args.methods, METHODS + MORE_METHODS)
    settings = omniglot.parse_names("--settings", args.settings, SETTINGS)
    if not os.path.isdir(args.data_dir):
        raise UsageError(f"--data_dir {args.data_dir} is not a folder (Omniglot's zips)")
    start = time.perf_counter()
    params = run_params(args)
    images = data(args.data_dir)
    test_episodes = args.test_episodes or 1000  # conv.gin's
    if args.reference_only:
        class_means.write_reference(
            args.work_dir, settings, test_episodes, configs=CONFIGS, data=images
        )
        return 0
    for setting in settings:
        for method in methods:
            run = f"{method}_{setting}"
            omniglot.train(args.work_dir, run, params, configs=CONFIGS, data=images)
            if setting == "5way5shot":  # the paper's sweep: tested at 1..9 shots
                omniglot.sweep(args.work_dir, run, omniglot.SWEEP_SHOTS, data=images)
            export(args.work_dir, args.data_dir, run)
            record = RunDir(os.path.join(args.work_dir, "runs", run)).read_results()
            print(f"{run}: {100 * record['mean']:.1f}%", flush=True)
    # The report: every finished run of the work directory, this invocation's and those of
    # others (one per core), so that W/results.md is the whole table whichever ends last.
    runs = finished_runs(args.work_dir, METHODS + MORE_METHODS, SETTINGS)
    summary: dict = {
        "methods": [m for m in METHODS + MORE_METHODS if any(f"{m}_{s}" in runs for s in SETTINGS)],
        "settings": [s for s in SETTINGS if any(r.endswith(f"_{s}") for r in runs)],
        "runs": runs,
    }
    # Every run is exported; the one to serve per setting: the best on validation.
    summary["served"] = {s: omniglot.best_by_validation(runs, s) for s in summary["settings"]}
    for setting, run in summary["served"].items():
        print(f"{setting}: serve {os.path.join(args.work_dir, 'export', run)}", flush=True)
    summary["reference"] = {
        s: class_means.reference(s, test_episodes, configs=CONFIGS, data=images)
        for s in summary["settings"]
    }
    summary.update(
        sweep_shots=list(omniglot.SWEEP_SHOTS),
        wall_clock_seconds=round(time.perf_counter() - start, 1),
        command=" ".join(["python -m viable_tf.experiments.omniglot_conv", *sys.argv[1:]]),
    )
    omniglot.write_summary(summary, args.work_dir, report(summary))
    return 0


def main() -> None:
    run_main(_main, "omniglot_conv")


if __name__ == "__main__":
    main()
