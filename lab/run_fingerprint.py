"""A run's fingerprint, to show that a refactor changed nothing a user can observe.

    python lab/run_fingerprint.py RUN_DIR EXPORT_BASE > fingerprint.json
    python lab/run_fingerprint.py RUN_DIR - > fingerprint.json   # no export (a classifier's)

Prints, as JSON: every TensorBoard scalar (tag, step, float32 bits) and image (tag,
step, SHA-256 of the PNG) of RUN_DIR's event files, except the wall-clock rate
`train/meta_updates_per_second`; results.json without its timings; the operative
config; the SHA-256 of each checkpoint's tensors; the signature defs of
EXPORT_BASE/1/saved_model.pb; and a served prediction: the export loaded by
viable-serve's Servable and called on fixed inputs (float32 bits). Two runs of the same
command on the same machine and float path before and after a refactor must print the
same (compare with `diff`).
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import sys

import numpy as np
import tensorflow as tf
from google.protobuf import json_format
from tensorboard.backend.event_processing import event_accumulator

TIMINGS = {"train_and_eval_seconds", "train_wall_clock_seconds", "seconds", "wall_seconds"}


def _bits(values) -> list[int]:
    return np.asarray(values, np.float32).view(np.uint32).ravel().tolist()


def events(run_dir: str) -> dict:
    accumulator = event_accumulator.EventAccumulator(
        run_dir,
        size_guidance={
            event_accumulator.SCALARS: 0,
            event_accumulator.IMAGES: 0,
            event_accumulator.TENSORS: 0,
        },
    )
    accumulator.Reload()
    out = {}
    for tag in sorted(accumulator.Tags()["tensors"]):
        if tag == "train/meta_updates_per_second":
            continue
        out[tag] = [
            (e.step, hashlib.sha256(e.tensor_proto.SerializeToString()).hexdigest()[:16])
            for e in accumulator.Tensors(tag)
        ]
    for tag in sorted(accumulator.Tags()["scalars"]):
        out[tag] = [(e.step, _bits([e.value])[0]) for e in accumulator.Scalars(tag)]
    return out


def results(run_dir: str) -> dict:
    with open(os.path.join(run_dir, "results.json")) as f:
        record = json.load(f)

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in TIMINGS}
        return value

    return strip(record)


def checkpoints(run_dir: str) -> dict:
    out = {}
    for folder in ("best", "checkpoints"):
        path = tf.train.latest_checkpoint(os.path.join(run_dir, folder))
        reader = tf.train.load_checkpoint(path)
        digest = hashlib.sha256()
        for name in sorted(reader.get_variable_to_shape_map()):
            if "_CHECKPOINTABLE_OBJECT_GRAPH" in name:
                continue
            digest.update(name.encode())
            digest.update(np.asarray(reader.get_tensor(name)).tobytes())
        out[folder] = (os.path.basename(path), digest.hexdigest())
    return out


def export(export_base: str) -> dict:
    from tensorflow.core.protobuf import saved_model_pb2

    sys.path.insert(0, os.getcwd())  # the measured checkout (fingerprint_run.sh cds there)
    try:
        from serving.servable import Servable
    except ImportError:  # a checkout from before the serving split
        from serving.models import Servable

    path = os.path.join(export_base, "1")
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        saved = saved_model_pb2.SavedModel.FromString(f.read())
    signatures = {
        key: json_format.MessageToDict(value)
        for key, value in sorted(saved.meta_graphs[0].signature_def.items())
    }
    for value in signatures.values():  # tensor names carry counters of the tracing
        for group in ("inputs", "outputs"):
            for info in value.get(group, {}).values():
                info.pop("name", None)
    rng = np.random.default_rng(0)
    x = rng.uniform(-5, 5, (2, 6, 1)).astype(np.float32)
    inputs = {
        "support_x": x,
        "support_y": np.sin(x),
        "query_x": np.linspace(-5, 5, 50, dtype=np.float32).reshape(1, 50, 1).repeat(2, 0),
    }
    outputs = Servable("sine", 1, path).run("serving_default", inputs)
    return {
        "signatures": signatures,
        "served": {k: _bits(v) for k, v in sorted(outputs.items())},
        "assets": sorted(os.listdir(os.path.join(path, "assets.extra"))),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", help="a run written by viable-train")
    parser.add_argument("export_base", help="its export's base folder, or - for none")
    args = parser.parse_args()
    run_dir, export_base = args.run_dir, args.export_base
    with open(os.path.join(run_dir, "operative_config.gin")) as f:
        config = f.read()
    print(
        json.dumps(
            {
                "events": events(run_dir),
                "event_files": len(glob.glob(os.path.join(run_dir, "events.out.tfevents*"))),
                "results": results(run_dir),
                "operative_config": config,
                "checkpoints": checkpoints(run_dir),
                "export": None if export_base == "-" else export(export_base),
            },
            indent=1,
            sort_keys=True,
        )
    )


if __name__ == "__main__":
    main()
