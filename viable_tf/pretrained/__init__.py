"""Trained models that ship with the package, as exports in TF Serving's layout.

    python -m viable_tf.pretrained

prints one line per model: its name, its export base path (`BASE/<version>/`, what
`viable-serve --model_base_path` and TensorFlow Serving's `--model_base_path` take) and
what it is, with its test figure read from the export's own metadata. Serve one:

    viable-serve --model_name=omniglot --model_base_path=BASE

then open http://localhost:8501/demo and draw: the page classifies drawings against the
support set you draw. Each export carries example drawings of Omniglot's test alphabets
(never seen in training) and their licence in `assets.extra/examples/`.
"""

from __future__ import annotations

import json
import os

#: The shipped models: name -> what it is. Their figures are in their exports' metadata
#: (assets.extra/viable_model.json) and in results/records/omniglot_images/.
MODELS = {
    "omniglot_protonet_5way1shot": (
        "the Prototypical Network, Omniglot 5-way 1-shot end to end, the best image "
        "classifier here (drawings 105 x 105 x 1, 0..1, white background)"
    ),
    "omniglot_simviable_proto_5way1shot": (
        "simVIABLE with the prototype head, Omniglot 5-way 1-shot end to end (drawings "
        "105 x 105 x 1, 0..1, white background)"
    ),
}


def base_path(name: str) -> str:
    """The export base path of shipped model `name` (its versions are folders in it)."""
    if name not in MODELS:
        raise ValueError(f"no shipped model {name!r}; shipped: {', '.join(MODELS)}")
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), name)


def evaluation(name: str) -> dict:
    """The shipped model's test figures, as its export records them."""
    base = base_path(name)
    version = max(int(v) for v in os.listdir(base) if v.isdigit())
    with open(os.path.join(base, str(version), "assets.extra", "viable_model.json")) as f:
        return json.load(f)["evaluation"]


def describe() -> list[str]:
    """One line per shipped model: name, base path, what it is and its test figure."""
    lines = []
    for name, what in MODELS.items():
        record = evaluation(name)
        figure = (
            f"test {record['metric']} {100 * record['mean']:.1f} +- {100 * record['ci95']:.1f}% "
            f"(95% CI, {record['num_tasks']:,} episodes)"
        )
        lines.append(f"{name}  {base_path(name)}  {what}; {figure}")
    return lines
