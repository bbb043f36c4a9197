"""What happens in the meta-update whose loss jumps? (relVIABLE at 20-way 1-shot end to
end: one meta-batch's loss exploded, docs/lab/omniglot/end_to_end.md, "relVIABLE's setback
at 20 ways").

    python -m lab.inner_loop_jumps catch RUN_DIR OUT [--max_updates 6000] \
        [--factor 3] [--gin_param=DATA_DIR='W/features']
    python -m lab.inner_loop_jumps anatomy RUN_DIR OUT/caught_<step> \
        [--rates 1.0,0.8,0.5] [--gin_param=DATA_DIR='W/features']

`catch` copies the run's latest checkpoint into OUT (the run is not touched) and trains
on from it by the run's operative config, one meta-update per call, writing the state
after every update into a ring of the last 8 (OUT/ring/slot<k>, with its step and meta
loss in slot<k>.step); it stops when an update's meta loss exceeds `factor` times the
median of the last 200 (after 50), and keeps the ring as OUT/caught_<step>. The conv runs
do not retrace their path bit for bit, so a replay meets jumps at other steps than its
run, or none.

`anatomy` reads each kept state and runs the inner loop on the meta-batches drawn at the
last two steps (the jump's is drawn at the step before the state after it): per task and
step, the inner loss, the support loss, the size of the inner loss's gradient in phi and
of the support loss's, their cosine, |phi|, and the largest |prediction|; and, with
--rates, the counterfactual: from the same state, the support loss along the inner loop
and the query loss after it when the inner loss is stepped at each of the rates, and
when the task loss alone is (CAVIA's step on the same weights).
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import shutil
import statistics

import numpy as np

RING = 8


def catch(
    run_dir: str, out: str, max_updates: int, factor: float, gin_params: tuple[str, ...]
) -> int | None:
    """The step after the jump's update (its ring kept in OUT/caught_<step>), or None."""
    import tensorflow as tf

    from viable_tf.cli.common import parse_gin
    from viable_tf.run_dir import RunDir

    latest = tf.train.latest_checkpoint(RunDir(run_dir).checkpoints)
    if latest is None:
        raise FileNotFoundError(f"no training checkpoint in {run_dir}/checkpoints")
    checkpoints = os.path.join(out, "checkpoints")
    os.makedirs(checkpoints, exist_ok=True)
    for path in glob.glob(latest + ".*"):
        shutil.copy(path, checkpoints)
    with open(os.path.join(checkpoints, "checkpoint"), "w") as f:
        f.write(f'model_checkpoint_path: "{os.path.basename(latest)}"\n')
    steady = (
        "EvaluationSpec.summary_every=1",
        "PerformanceSpec.steps_per_call=1",
        "Trainer.show_progress=False",
    )
    parse_gin([os.path.join(run_dir, "operative_config.gin")], [*gin_params, *steady])
    from viable_tf.training import Trainer

    trainer = Trainer(model_dir=out)
    trainer.restore()
    state = trainer.checkpoints.latest.checkpoint
    ring = os.path.join(out, "ring")
    os.makedirs(ring, exist_ok=True)
    recent: collections.deque[float] = collections.deque(maxlen=200)
    for _ in range(max_updates):
        ran, loss_sums, *_ = trainer.train_chunk(tf.constant(1))
        loss = float(tf.reduce_sum(loss_sums)) / int(ran)
        step = int(trainer.step.numpy())
        slot = os.path.join(ring, f"slot{step % RING}")
        state.write(slot)
        with open(slot + ".step", "w") as f:
            f.write(f"{step} {loss}\n")
        median = statistics.median(recent) if len(recent) >= 50 else None
        if median is not None and loss > factor * median:
            shutil.copytree(ring, os.path.join(out, f"caught_{step}"))
            print(f"jump: meta loss {loss:.3f} at update {step}, median {median:.3f}")
            return step
        recent.append(loss)
    return None


def ring_states(caught: str) -> list[tuple[int, float, str]]:
    """(step, meta loss, checkpoint prefix) of each kept state, by step."""
    states = []
    for path in glob.glob(os.path.join(caught, "slot*.step")):
        with open(path) as f:
            step, loss = f.read().split()
        states.append((int(step), float(loss), path[: -len(".step")]))
    return sorted(states)


def inner_loop_rows(learner, batch) -> list[dict]:
    """Per inner step from phi_0, per task: the quantities of the module's docstring."""
    import tensorflow as tf

    from lab import inner_path

    path, adapted = inner_path.walk(learner, batch)
    rows = []
    for step in path:
        rows.append(
            {
                "step": step.index,
                "inner": step.inner.numpy(),
                "grad": tf.norm(step.inner_grad, axis=1).numpy(),
                "task_grad": tf.norm(step.task_grad, axis=1).numpy(),
                "cosine": step.cosine.numpy(),
            }
        )
    rows.append({"step": len(path), "query": learner.query_loss(batch, adapted).numpy()})
    support = inner_path.support_of(batch)
    for row, state in zip(rows, [step.state for step in path] + [adapted], strict=True):
        row.update(
            support=learner.support_loss(state, *support).numpy(),
            phi=tf.norm(state.context, axis=1).numpy(),
            largest=float(tf.reduce_max(tf.abs(learner.predict(state, batch.support_x)))),
        )
    return rows


def stepped_path(learner, batch, stepped: str, rate: float):
    """[S + 1, B] support losses along S steps of the `stepped` loss ("inner" or "task")
    at `rate` from phi_0, and the query loss after them [B]."""
    from lab import inner_path

    path, adapted = inner_path.walk(learner, batch, stepped=stepped, rate=rate)
    support = learner.support_loss(adapted, *inner_path.support_of(batch)).numpy()
    losses = [step.task.numpy() for step in path] + [support]
    return np.stack(losses), learner.query_loss(batch, adapted).numpy()


def anatomy(
    run_dir: str, caught: str, gin_params: tuple[str, ...], rates: tuple[float, ...] = ()
) -> None:
    import tensorflow as tf

    from viable_tf.config import load_run
    from viable_tf.ops import seed_for

    run = load_run(run_dir, gin_params)
    learner, seed = run.learner, run.trainer_settings.get("seed", 0)
    batch_size = run.trainer_settings["meta_batch_size"]
    states = ring_states(caught)
    last = states[-1][0]
    print("kept states (step, meta loss of the update that made it):")
    print("  " + ", ".join(f"{step}: {loss:.3f}" for step, loss, _ in states))
    show = lambda values: np.array2string(np.asarray(values), precision=2)  # noqa: E731
    for drawn in (last - 1, last):
        batch = run.tasks.sample(seed_for(seed, drawn), batch_size)
        print(f"\nmeta-batch drawn at step {drawn} (the update to {drawn + 1})")
        for step, _, prefix in states:
            tf.train.Checkpoint(learner=learner).read(prefix).expect_partial()
            rows = inner_loop_rows(learner, batch)
            print(f" state at {step}: query loss after adaptation {show(rows[-1]['query'])}")
            for row in rows:
                line = f"   step {row['step']}: support {show(row['support'])}"
                line += f" |phi| {show(row['phi'])}"
                if "inner" in row:
                    line += (
                        f" inner {show(row['inner'])} |grad| {show(row['grad'])}"
                        f" |task grad| {show(row['task_grad'])} cos {show(row['cosine'])}"
                    )
                print(line + f" largest |prediction| {row['largest']:.1f}")
            for name, stepped in (("inner loss", "inner"), ("task loss", "task")):
                for rate in rates:
                    path, query = stepped_path(learner, batch, stepped, rate)
                    steps = ", ".join(" > ".join(f"{v:.2f}" for v in task) for task in path.T)
                    print(
                        f"   {name} at rate {rate}: support loss per task along the steps "
                        f"[{steps}], query loss {show(query)}"
                    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    catching = commands.add_parser("catch")
    catching.add_argument("run_dir")
    catching.add_argument("out")
    catching.add_argument("--max_updates", type=int, default=6000)
    catching.add_argument("--factor", type=float, default=3.0)
    reading = commands.add_parser("anatomy")
    reading.add_argument("run_dir")
    reading.add_argument("caught")
    reading.add_argument(
        "--rates",
        type=lambda text: tuple(float(rate) for rate in text.split(",")),
        default=(),
        help="comma-separated inner rates: the inner loss's and the task loss's steps at each",
    )
    for command in (catching, reading):
        command.add_argument("--gin_param", action="append", default=[])
    args = parser.parse_args()
    if args.command == "catch":
        step = catch(args.run_dir, args.out, args.max_updates, args.factor, tuple(args.gin_param))
        if step is None:
            print(f"no jump in {args.max_updates} updates")
    else:
        anatomy(args.run_dir, args.caught, tuple(args.gin_param), args.rates)


if __name__ == "__main__":
    main()
