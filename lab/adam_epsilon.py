"""Research record: could Adam's epsilon matter for a trained run's loss network?

    python -m lab.adam_epsilon RUN_DIR [RUN_DIR ...]

Keras' Adam divides by sqrt(v) + eps (eps = 1e-7, added before the bias correction),
PyTorch's, which the code lineage uses, by sqrt(v_hat) + eps (1e-8, after it). The two
differ only where sqrt(v_hat) is within a few orders of magnitude of eps. For each run's
latest checkpoint this prints, for the loss network's and the prediction network's
variables, the fraction of elements whose sqrt(v_hat) is below 1e-5 (100 x Keras' eps)
and its smallest non-zero value; elements with v = 0 get no gradient at all (a ReLU loss
network's biases), so their update is zero under either rule.
"""

from __future__ import annotations

import argparse
import os

import numpy as np


def second_moments(run_dir: str) -> dict[str, list[np.ndarray]]:
    """sqrt(v_hat) of each trained variable, grouped by part ('loss_network', 'network')."""
    import tensorflow as tf

    path = tf.train.latest_checkpoint(os.path.join(run_dir, "checkpoints"))
    reader = tf.train.load_checkpoint(path)
    value = "{}/.ATTRIBUTES/VARIABLE_VALUE".format
    step = int(reader.get_tensor(value("optimizer/_iterations")))
    # The object graph says which node each of the optimizer's trained variables is and
    # which nodes hold its slots (momentum, then velocity, in `_variables` from index 1).
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    nodes = graph.nodes

    def child(node_id: int, name: str) -> int:
        return next(c.node_id for c in nodes[node_id].children if c.local_name == name)

    def key(node_id: int) -> str:
        return next(a.checkpoint_key for a in nodes[node_id].attributes)

    # Every node under the learner's loss network (a variable is saved once, under the
    # first path that reaches it, which may be the optimizer's).
    loss_nodes, todo = set(), [child(child(0, "learner"), "loss_network")]
    while todo:
        node = todo.pop()
        if node not in loss_nodes:
            loss_nodes.add(node)
            todo += [c.node_id for c in nodes[node].children]
    optimizer = child(0, "optimizer")
    trained = nodes[child(optimizer, "_trainable_variables")].children
    slots = nodes[child(optimizer, "_variables")].children
    by_index = {int(c.local_name): c.node_id for c in slots}
    correction = 1.0 - 0.999**step
    parts: dict[str, list[np.ndarray]] = {}
    for c in trained:
        velocity = reader.get_tensor(key(by_index[2 * int(c.local_name) + 2]))
        part = "loss_network" if c.node_id in loss_nodes else "network"
        parts.setdefault(part, []).append(np.sqrt(velocity / correction).ravel())
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+")
    args = parser.parse_args()
    print("| run | part | elements | v = 0 | sqrt(v_hat) < 1e-5 | smallest non-zero | median |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for run in args.runs:
        for part, arrays in sorted(second_moments(run).items()):
            values = np.concatenate(arrays)
            nonzero = values[values > 0]
            print(
                f"| {os.path.basename(run.rstrip('/'))} | {part} | {values.size} "
                f"| {np.mean(values == 0):.1%} | {np.mean((values > 0) & (values < 1e-5)):.2%} "
                f"| {nonzero.min():.2e} | {np.median(nonzero):.2e} |"
            )


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    main()
