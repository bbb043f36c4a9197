"""The main job: meta-train, evaluate the best checkpoint, write results.json."""

from __future__ import annotations

import json
import os
import time

from viable_tf import precision
from viable_tf.evaluation.core import Evaluation
from viable_tf.evaluation.protocols import test_protocol
from viable_tf.learners.base import Learner
from viable_tf.run_dir import RunDir
from viable_tf.tasks.base import TaskFamily
from viable_tf.training import summaries
from viable_tf.training.settings import PerformanceSpec
from viable_tf.training.trainer import Trainer


def results_dict(
    learner: Learner,
    tasks: TaskFamily,
    evaluation: Evaluation,
    *,
    checkpoint_step: int,
    best_validation: float,
    steps_trained: int,
    settings: dict,
) -> dict:
    """The JSON record of one evaluation of a trained run; `settings` holds the trainer's
    seed, num_steps and meta_batch_size."""
    return {
        "method": learner.method_name,
        "metric": evaluation.metric,
        "mean": evaluation.mean,
        "ci95": evaluation.ci95,
        "num_tasks": evaluation.num_tasks,
        "num_support": evaluation.num_support,
        "context_dim": learner.context_dim,
        "checkpoint_step": checkpoint_step,
        f"best_validation_{evaluation.metric}": best_validation,
        "steps_trained": steps_trained,
        "seed": settings["seed"],
        "inner_loss_pre": float(evaluation.inner_loss_pre.mean()),
        "inner_loss_post": float(evaluation.inner_loss_post.mean()),
        "hparams": {**learner.hparams(), **tasks.hparams(), **settings},
        **({"precision": settings["precision"]} if "precision" in settings else {}),
    }


def per_task_record(evaluation: Evaluation) -> dict:
    """Each test task's metric, in the test protocol's fixed order: what a paired
    comparison of two runs on the same tasks needs (lab/paired_difference.py)."""
    return {
        "metric": evaluation.metric,
        "num_support": evaluation.num_support,
        "per_task": [float(v) for v in evaluation.per_task],
    }


def evaluate_trained(trainer: Trainer, *, checkpoint_step: int) -> tuple[dict, dict]:
    """The test record of the weights loaded in a trainer that just trained, and its
    per-task record."""
    evaluation = test_protocol(trainer.tasks)(trainer.learner)
    return results_dict(
        trainer.learner,
        trainer.tasks,
        evaluation,
        checkpoint_step=checkpoint_step,
        best_validation=float(trainer.early_stopping.best_val.numpy()),
        steps_trained=int(trainer.step.numpy()),
        settings=_settings(trainer),
    ), per_task_record(evaluation)


def evaluate_loaded(run, *, num_support: int | None = None) -> tuple[dict, dict]:
    """The test record of a run restored by `viable_tf.config.load_run` (a LoadedRun),
    at K = `num_support`, and its per-task record."""
    evaluation = test_protocol(run.tasks, num_support=num_support)(run.learner)
    state = run.training_state  # read once by load_run, whatever the number of K
    return results_dict(
        run.learner,
        run.tasks,
        evaluation,
        checkpoint_step=run.checkpoint_step,
        best_validation=state.get("best_val", float("nan")),
        steps_trained=state.get("step", run.checkpoint_step),
        settings={"seed": 0, **run.trainer_settings},
    ), per_task_record(evaluation)


def evaluate_and_write(run, *, num_support: int | None = None) -> dict:
    """`evaluate_loaded`, its record written to the run's eval_k<K>.json and its per-task
    record beside it (viable-eval's output); returns the record."""
    record, per_task = evaluate_loaded(run, num_support=num_support)
    write_json(record, run.run_dir.evaluation(record["num_support"]))
    write_json(per_task, run.run_dir.per_task(record["num_support"]))
    return record


def _silent(line: str) -> None:
    """Says nothing: the trainer says it."""


def _settings(trainer: Trainer) -> dict:
    return {
        "seed": trainer.seed,
        "num_steps": trainer.num_steps,
        "meta_batch_size": trainer.meta_batch_size,
        # Said where it is not the default, so that a bfloat16 run's record says so.
        **({"precision": trainer.precision} if trainer.precision != "float32" else {}),
    }


def write_json(record: dict, path: str) -> None:
    with open(path, "w") as f:
        json.dump(record, f, indent=2)
        f.write("\n")


def train_and_evaluate(model_dir: str) -> dict | None:
    """Meta-trains as configured by gin, evaluates, writes `model_dir/results.json`.

    Returns the results, or None on a worker that is not the chief: it stops after
    training, since only the chief's checkpoints exist (and evaluation needs no peer).
    """
    run = RunDir(model_dir)
    # A precision the run cannot compute in is refused before anything is written (the
    # trainer says the fall-back to float32, where there is one, as it starts).
    performance = PerformanceSpec()
    precision.resolve(performance.precision, force=performance.force_precision, say=_silent)
    os.makedirs(model_dir, exist_ok=True)
    trainer = Trainer(model_dir=model_dir)
    start = time.perf_counter()
    trainer.train()
    # Training's wall-clock over every process that resumed the run (this one's included).
    train_wall_clock = round(trainer.checkpoints.clock.total(), 1)
    if not trainer.chief:
        return None
    record, per_task = evaluate_trained(trainer, checkpoint_step=trainer.restore_best())
    write_json(per_task, run.per_task())
    record["train_and_eval_seconds"] = round(time.perf_counter() - start, 1)
    record["train_wall_clock_seconds"] = train_wall_clock
    record["replicas"] = trainer.strategy.num_replicas_in_sync
    write_json(record, run.results)
    metric = record["metric"]
    summaries.hparams_session(
        model_dir,
        record["hparams"],
        {
            f"test/{metric}": record["mean"],
            f"test/{metric}_ci95": record["ci95"],
            f"best_validation/{metric}": record[f"best_validation_{metric}"],
        },
        step=record["steps_trained"],
    )
    # The evaluation's configurables are now bound too: record the full config.
    summaries.write_operative_config(run)
    return record
