"""The main job: meta-train, evaluate the best checkpoint, write results.json."""

from __future__ import annotations

import json
import os
import time

import gin

from viable_tf.evaluation.protocols import test_protocol
from viable_tf.evaluation.sine import Evaluation
from viable_tf.training import summaries
from viable_tf.training.trainer import Trainer


def results_dict(trainer: Trainer, evaluation: Evaluation, best_step: int) -> dict:
    """The JSON record of one evaluation of a trained run."""
    learner = trainer.learner
    return {
        "method": learner.method_name,
        "metric": evaluation.metric,
        "mean": evaluation.mean,
        "ci95": evaluation.ci95,
        "num_tasks": evaluation.num_tasks,
        "num_support": evaluation.num_support,
        "context_dim": getattr(learner, "context_dim", 0),
        "checkpoint_step": best_step,
        f"best_validation_{evaluation.metric}": float(trainer.best_val.numpy()),
        "steps_trained": int(trainer.step.numpy()),
        "seed": trainer.seed,
        "inner_loss_pre": float(evaluation.inner_loss_pre.mean()),
        "inner_loss_post": float(evaluation.inner_loss_post.mean()),
        "hparams": run_hparams(trainer),
    }


def run_hparams(trainer: Trainer) -> dict:
    """Everything that names a run's setting: learner, task family, seed and length."""
    return {
        **trainer.learner.hparams(),
        **trainer.tasks.hparams(),
        "seed": trainer.seed,
        "num_steps": trainer.num_steps,
        "meta_batch_size": trainer.meta_batch_size,
    }


def evaluate_run(trainer: Trainer, *, checkpoint_step: int, num_support: int | None = None) -> dict:
    """Evaluates the weights loaded in `trainer` (from `checkpoint_step`) on the test tasks."""
    evaluation = test_protocol(trainer.tasks, num_support=num_support)(trainer.learner)
    return results_dict(trainer, evaluation, checkpoint_step)


def load_run(model_dir: str, gin_params: tuple[str, ...] = ()) -> tuple[Trainer, int]:
    """Rebuilds a trained run from its operative config, with its best weights loaded;
    returns the trainer and the step those weights are from.

    Raises FileNotFoundError (one line, naming what is missing) if `model_dir` is
    not a run written by viable-train or holds no checkpoint.
    """
    from viable_tf.config import parse

    config = os.path.join(model_dir, "operative_config.gin")
    if not os.path.isfile(config):
        raise FileNotFoundError(
            f"{model_dir} is not a trained run: expected {config}, written by viable-train"
        )
    parse([config], gin_params)
    trainer = Trainer(model_dir=model_dir, show_progress=False)
    if not (trainer.best_manager.latest_checkpoint or trainer.manager.latest_checkpoint):
        raise FileNotFoundError(
            f"no checkpoint in {model_dir}: expected {model_dir}/best/ or "
            f"{model_dir}/checkpoints/, written by viable-train"
        )
    trainer.restore()  # step, best validation result, ...
    return trainer, trainer.restore_best()


def write_json(record: dict, path: str) -> None:
    with open(path, "w") as f:
        json.dump(record, f, indent=2)
        f.write("\n")


def train_and_evaluate(model_dir: str) -> dict | None:
    """Meta-trains as configured by gin, evaluates, writes `model_dir/results.json`.

    Returns the results, or None on a worker that is not the chief: it stops after
    training, since only the chief's checkpoints exist (and evaluation needs no peer).
    """
    os.makedirs(model_dir, exist_ok=True)
    trainer = Trainer(model_dir=model_dir)
    start = time.perf_counter()
    trainer.train()
    if not trainer.chief:
        return None
    record = evaluate_run(trainer, checkpoint_step=trainer.restore_best())
    record["train_and_eval_seconds"] = round(time.perf_counter() - start, 1)
    record["replicas"] = trainer.strategy.num_replicas_in_sync
    write_json(record, os.path.join(model_dir, "results.json"))
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
    with open(os.path.join(model_dir, "operative_config.gin"), "w") as f:
        f.write(gin.operative_config_str())
    return record
