"""How noisy is a trained run's meta-gradient from one meta-batch to the next, per part of
the learner? The question behind relVIABLE's slow and unsteady meta-training end to end
(docs/lab/omniglot/end_to_end.md, "Why relVIABLE falls behind").

    python -m lab.meta_gradient_noise RUN_DIR [--checkpoints all|best|STEP,STEP] \
        [--batches 32] [--seed 1] [--gin_param=DATA_DIR='W/features']

For each checkpoint the run holds (the best one, and the training ones kept in
D/checkpoints/ unless --checkpoints=best; of those, the meta-updates listed, if
--checkpoints lists some), --batches meta-batches of the run's B training
tasks are drawn from the training family (seeds (--seed, i), not the training run's own),
and the meta-gradient of each (the query loss after the inner loop, before the trainer's
clipping) is taken. Per part of the learner (its loss network, if it has one, and the
rest: the prediction network and its context weights), over the batches:

- `|g|`: the mean size of one batch's gradient; `|E g|`: the size of their mean;
- `SNR`: the squared size of the expected gradient over one batch's variance about it,
  |E g|^2 / E|g - E g|^2, with |E g|^2 corrected for the noise left in the mean of the
  drawn batches (0 where the correction takes it below 0); an Adam step on one batch
  points where the expected gradient points about as much as this is above 1;
- `cos`: the mean cosine between the gradients of two different batches;
- `live`: how many of the part's elements have a gradient at all (a dead ReLU unit's
  weights have none, and Adam does not move them);
- `coherence`: per live element, the mean gradient over the root mean square, |E g_i| /
  sqrt(E g_i^2), averaged over the live elements: the share of an Adam step (which
  moves every element by about its rate, whatever its gradient's size) that follows the
  expected gradient; the rest of each element's step is a random walk, and a part with
  more live elements walks further;
- `clipped`: the share of the gradient's elements beyond the trainer's elementwise clip
  (its `ClipElementwise` limit, if the run has one), on average over batches.

And the mean query loss of the batches (the outer objective at that checkpoint).
"""

from __future__ import annotations

import argparse
import os

import numpy as np


def default(name: str):
    """Trainer's default for a setting the run's config does not bind."""
    import inspect

    from viable_tf.training import Trainer

    return inspect.signature(Trainer).parameters[name].default


def parts(learner) -> dict[str, list]:
    """The learner's trainable variables by part: its loss network's (if it has one) and
    the rest, in `trainable_variables` order."""
    from viable_tf.learners.viable import LearnedInnerLoss

    variables = list(learner.trainable_variables)
    if not isinstance(learner, LearnedInnerLoss):
        return {"prediction": variables}
    own = {id(v) for v in learner.loss_network.trainable_variables}
    return {
        "prediction": [v for v in variables if id(v) not in own],
        "loss network": [v for v in variables if id(v) in own],
    }


def gradient_statistics(gradients: np.ndarray, clip_value: float | None) -> dict:
    """Noise statistics of [M, N] gradients of M batches (M >= 2), as the module says."""
    count = gradients.shape[0]
    mean = gradients.mean(0)
    variance = ((gradients - mean) ** 2).sum(1).sum() / (count - 1)  # E|g - E g|^2
    signal = max(float(mean @ mean) - variance / count, 0.0)
    norms = np.linalg.norm(gradients, axis=1)
    unit = gradients / np.maximum(norms, 1e-30)[:, None]
    cosines = unit @ unit.T
    off_diagonal = cosines[~np.eye(count, dtype=bool)]
    rms = np.sqrt((gradients**2).mean(0))
    live = rms > 0
    coherence = np.abs(mean[live]) / rms[live]
    clipped = (
        float((np.abs(gradients) > clip_value).mean()) if clip_value is not None else float("nan")
    )
    return {
        "norm": float(norms.mean()),
        "mean_norm": float(np.linalg.norm(mean)),
        "snr": signal / variance if variance > 0 else float("inf"),
        "cos": float(off_diagonal.mean()),
        "coherence": float(coherence.mean()) if coherence.size else float("nan"),
        "elements": int(gradients.shape[1]),
        "live": int(live.sum()),
        "clipped": clipped,
    }


def noise(
    model_dir: str, which: str, batches: int, seed: int, gin_params: tuple[str, ...]
) -> list[dict]:
    """One entry per checkpoint: {'step', 'query_loss', 'parts': {part: statistics}}."""
    import tensorflow as tf

    from lab.loss_network_anatomy import _checkpoints
    from viable_tf.config import load_run
    from viable_tf.ops import seed_for
    from viable_tf.training.meta_gradient import ClipElementwise, weighted_gradients

    if batches < 2:
        raise ValueError(f"--batches must be >= 2 (a variance needs two), got {batches}")
    run = load_run(model_dir, gin_params)
    from viable_tf.training import OptimizerChain

    transforms = OptimizerChain().transforms  # the run's chain, as its config binds it
    clip_value = next((t.limit for t in transforms if isinstance(t, ClipElementwise)), None)
    meta_batch_size = run.trainer_settings.get("meta_batch_size", default("meta_batch_size"))
    learner = run.learner
    groups = parts(learner)
    variables = [v for group in groups.values() for v in group]
    draws = [run.tasks.sample(seed_for(seed, i), meta_batch_size) for i in range(batches)]
    paths = _checkpoints(model_dir, "best" if which == "best" else "all")
    if which not in ("all", "best"):
        wanted = {int(step) for step in which.split(",")}
        paths = [path for path in paths if int(path.rsplit("-", 1)[-1]) in wanted]
        if not paths:
            raise FileNotFoundError(f"{model_dir} keeps no checkpoint at meta-update {which}")
    entries = []
    for path in paths:
        tf.train.Checkpoint(learner=learner).read(path).expect_partial()
        flat = {name: [] for name in groups}
        losses = []
        for batch in draws:
            loss, _, grads = weighted_gradients(learner, variables, batch, 1.0)
            losses.append(float(loss))
            start = 0
            for name, group in groups.items():
                chosen = grads[start : start + len(group)]
                flat[name].append(np.concatenate([g.numpy().ravel() for g in chosen]))
                start += len(group)
        entries.append(
            {
                "step": int(path.rsplit("-", 1)[-1]),
                "query_loss": float(np.mean(losses)),
                "parts": {
                    name: gradient_statistics(np.stack(rows), clip_value)
                    for name, rows in flat.items()
                },
            }
        )
    return entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model_dir")
    parser.add_argument("--checkpoints", default="all", help="all, best, or STEP,STEP,...")
    parser.add_argument("--batches", type=int, default=32)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--gin_param", action="append", default=[])
    args = parser.parse_args()
    if args.batches < 2:
        parser.error("--batches must be >= 2 (a variance needs two)")
    if args.checkpoints not in ("all", "best") and not all(
        step.isdigit() for step in args.checkpoints.split(",")
    ):
        parser.error(f"--checkpoints must be all, best or STEP,STEP,..., got {args.checkpoints!r}")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    entries = noise(
        args.model_dir, args.checkpoints, args.batches, args.seed, tuple(args.gin_param)
    )
    print(
        "| checkpoint | query loss | part | elements | live | \\|g\\| | \\|E g\\| | SNR | cos "
        "| coherence | clipped |"
    )
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for entry in entries:
        for name, s in entry["parts"].items():
            print(
                f"| {entry['step']} | {entry['query_loss']:.3f} | {name} | {s['elements']} "
                f"| {s['live']} | {s['norm']:.3g} | {s['mean_norm']:.3g} | {s['snr']:.3f} "
                f"| {s['cos']:.3f} | {s['coherence']:.3f} | {100 * s['clipped']:.2f}% |"
            )


if __name__ == "__main__":
    main()
