"""`viable-client omniglot`: episodes of Omniglot's test alphabets sent to a served image
classifier, as tensors or as PNG files, over gRPC and REST, scored with a 95% CI.

The episodes are drawn from the drawings as read from the zips (105 x 105, 0..1), by a
NumPy generator seeded per episode, so the same command sends the same episodes to any
server; the training pipeline's sampler (viable_tf.tasks) works on encoded features and
is not what a client of a served model has.
"""

from __future__ import annotations

import functools

import numpy as np
import tensorflow as tf

from serving.rest_client import rest_predict
from viable_tf.export import signature as sig


@functools.cache
def _test_split(data_dir: str):
    """The test alphabets' images, read from the zips once per process."""
    from viable_tf.datasets.omniglot import read_omniglot

    return read_omniglot(data_dir)["test"]


def omniglot_episode(data_dir: str, ways: int, shots: int, queries: int, seed: int):
    """An episode of test-split Omniglot images as read from the PNGs (0..1): support_x
    [1, N*K, 105, 105, 1], support_y int32 [1, N*K], query_x, query_y."""
    test = _test_split(data_dir)
    rng = np.random.default_rng(seed)
    classes = np.array(test.classes)
    chosen = rng.choice(np.unique(classes), ways, replace=False)
    support, query = [], []
    for label, name in enumerate(chosen):
        rows = rng.permutation(np.flatnonzero(classes == name))[: shots + queries]
        support += [(row, label) for row in rows[:shots]]
        query += [(row, label) for row in rows[shots:]]

    def arrays(pairs):
        rows, labels = zip(*pairs, strict=True)
        return test.images[list(rows)][None], np.array(labels, np.int32)[None]

    return (*arrays(support), *arrays(query))


#: How `viable-client omniglot` can send an episode's drawings.
INPUT_FORMS = ("tensors", "png")


def episode_inputs(form: str, support_x, support_y, query_x) -> tuple[str, dict]:
    """(signature, inputs) of an episode's drawings as tensors (0..1) or as PNG files."""
    from viable_tf.export.pngs import encode_pngs

    if form == "png":
        inputs = {
            sig.SUPPORT_PNG: encode_pngs(support_x),
            sig.SUPPORT_Y: support_y,
            sig.QUERY_PNG: encode_pngs(query_x),
        }
        return sig.SERVING_PNG, inputs
    return sig.SERVING_DEFAULT, {
        sig.SUPPORT_X: support_x,
        sig.SUPPORT_Y: support_y,
        sig.QUERY_X: query_x,
    }


def _accuracy_line(name: str, per_episode: list[float], queries: int) -> str:
    values = np.asarray(per_episode)
    ci = 1.96 * values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else float("nan")
    return (
        f"{name}: accuracy {values.mean():.3f} ± {ci:.3f} "
        f"(95% CI over {len(values)} episodes, {queries} queries)"
    )


def omniglot_report(client, args, spec: dict) -> str:
    """Accuracy of the served classifier on `num_episodes` test-alphabet episodes (over
    `client`, a serving.client.Client), with a
    95% CI over episodes: over gRPC, and over REST with --rest_url; the drawings as tensors
    and/or PNG files (--inputs); with --saved_model, the same episodes through that export
    loaded in this process, and how many answers differ from it."""
    forms = [form for form in args.inputs.split(",") if form]
    routes = ["gRPC"] + (["REST"] * bool(args.rest_url))
    local = tf.saved_model.load(args.saved_model) if args.saved_model else None
    accuracy: dict[str, list[float]] = {}
    differing = {}
    total = 0
    for episode in range(args.num_episodes):
        support_x, support_y, query_x, query_y = omniglot_episode(
            args.data_dir, args.num_ways, args.num_shots, args.num_queries, args.seed + episode
        )
        total += query_y.size
        reference = None
        if local is not None:
            signature, inputs = episode_inputs("tensors", support_x, support_y, query_x)
            tensors = {k: tf.constant(v) for k, v in inputs.items()}
            reference = local.signatures[signature](**tensors)[sig.CLASSES].numpy()
            accuracy.setdefault("in process, tensors", []).append(np.mean(reference == query_y))
        for form in forms:
            signature, inputs = episode_inputs(form, support_x, support_y, query_x)
            for route in routes:
                if route == "gRPC":
                    request = client.request(
                        inputs, model_name=args.model_name, signature_name=signature, **spec
                    )
                    classes = client.call(request)[sig.CLASSES]
                else:
                    classes = rest_predict(
                        args.rest_url, args.model_name, inputs, signature, **spec
                    )[sig.CLASSES]
                key = f"{route}, {form}"
                accuracy.setdefault(key, []).append(np.mean(classes == query_y))
                if reference is not None:
                    differing[key] = differing.get(key, 0) + int(np.sum(classes != reference))
    what = f"omniglot {args.num_ways}-way {args.num_shots}-shot, test alphabets, "
    lines = [_accuracy_line(what + key, values, total) for key, values in accuracy.items()]
    for key, count in differing.items():
        lines.append(f"{key}: {count} of {total} answers differ from the in-process model")
    return "\n".join(lines)
