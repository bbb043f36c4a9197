"""What a learner's inner step does while it meta-trains: the probe behind
docs/lab/omniglot/end_to_end.md, "Why simVIABLE collapsed end to end".

    .venv/bin/python -m lab.inner_step_probe omniglot_conv/simviable_5way1shot.gin 1000 \
        --data_dir ../shared/data/omniglot [--variant zero_output|task_loss_skip] [GIN_BINDING ...]

Trains from the config (B = 4, 100 validation episodes, a validation every 250 updates)
and, at the start and after each validation, prints on 16 fixed training episodes:
the logits' spread at phi_0; |d L_T / d phi| and |d Lhat / d phi| at phi_0 and the
cosine between them (how informative the inner loss's first step is about the task); how
far the inner steps move the query logits (std of the change); the query accuracy and
cross-entropy before -> after adaptation. A learner whose adaptation has been switched
off shows a step that no longer moves the query logits (~0.01) and chance accuracy.

--variant: `zero_output` starts the loss network's output layer at zero (in the configs
now as `output_init='zeros'`); `task_loss_skip` adds the task loss to a loss network
started at zero (Lhat = L_T + g_psi: the learner starts as CAVIA).
"""

from __future__ import annotations

import argparse
import tempfile
import time

from viable_tf.cli.common import parse_gin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("config")
    parser.add_argument("steps", type=int)
    parser.add_argument(
        "--data_dir", required=True, help="the folder of Omniglot's zips (IMAGE_DIR)"
    )
    parser.add_argument("--variant", choices=("none", "zero_output", "task_loss_skip"))
    parser.add_argument("bindings", nargs="*")
    args = parser.parse_intermixed_args()
    parse_gin(
        [args.config],
        [
            f"IMAGE_DIR={args.data_dir!r}",
            "META_BATCH_SIZE=4",
            "Trainer.show_progress=False",
            "EvaluationSpec.patience=None",
            "classification_validation_evaluator.num_episodes=100",
            *args.bindings,
        ],
    )
    import tensorflow as tf

    from lab import inner_path
    from viable_tf.training import EvaluationSpec, Trainer
    from viable_tf.training.triggers import FunctionTrigger

    trainer = Trainer(
        model_dir=tempfile.mkdtemp(),
        num_steps=args.steps,
        evaluation=EvaluationSpec(eval_every=250, figure_every=0),
    )
    learner = trainer.learner
    if args.variant in ("zero_output", "task_loss_skip"):
        kernel = learner.loss_network._output.kernel
        kernel.assign(tf.zeros_like(kernel))
    if args.variant == "task_loss_skip":
        learned = learner.inner_loss
        learner.inner_loss = lambda state, x, y, mask, **at_step: (
            learner.support_loss(state, x, y, mask) + learned(state, x, y, mask, **at_step)
        )
    batch = trainer.tasks.sample(tf.constant([7, 7], tf.int64), 16)
    support = (batch.support_x, batch.support_y, batch.support_mask)

    def probe(tag: str) -> None:
        state = learner.start_state(*support)
        logits = learner.predict(state, batch.support_x)
        first = inner_path.at(learner, batch, state)
        g_task, g_inner = first.task_grad, first.inner_grad
        cosine = tf.reduce_mean(first.cosine)
        before = learner.predict(state, batch.query_x)
        after = learner.predict(learner.adapt(*support, query_x=batch.query_x), batch.query_x)
        move = float(tf.math.reduce_std(after - before))
        hits = tf.equal(tf.argmax(after, -1, output_type=tf.int32), batch.query_y)

        def query_ce(y_hat):
            return float(tf.reduce_mean(learner.task_loss(y_hat, batch.query_y)))

        print(
            f"[{tag}] logit std {float(tf.math.reduce_std(logits)):.4f} "
            f"|dL_T/dphi| {float(tf.reduce_mean(tf.norm(g_task, axis=1))):.4g} "
            f"|dLhat/dphi| {float(tf.reduce_mean(tf.norm(g_inner, axis=1))):.4g} "
            f"cos {float(cosine):.3f} query-logit move {move:.4f} "
            f"query acc {float(tf.reduce_mean(tf.cast(hits, tf.float32))):.3f} "
            f"query CE {query_ce(before):.4f} -> {query_ce(after):.4f}",
            flush=True,
        )

    probe("init")
    start = time.time()

    def after_validation(step: int) -> None:
        best = float(trainer.early_stopping.best_val.numpy())
        print(f"step {step} best validation {best:.4f} ({time.time() - start:.0f} s)", flush=True)
        probe(f"step {step}")

    # After the trainer's own validation at each of its steps (triggers run in order).
    trainer.train(triggers=[FunctionTrigger(trainer.eval_every, after_validation)])


if __name__ == "__main__":
    main()
