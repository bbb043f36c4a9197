"""Distribution strategies for meta-training, chosen in gin.

    STRATEGY = 'default'       one device
    STRATEGY = 'mirrored'      MirroredStrategy over every local GPU (or logical CPU)
    STRATEGY = 'multi_worker'  MultiWorkerMirroredStrategy across the machines in TF_CONFIG
    LOGICAL_CPUS = N           split this machine's CPU into N logical devices first

The meta-batch of B tasks is what is split: replica r of R takes tasks
[r*B//R, (r+1)*B//R) of the same global batch, and its loss is weighted by its
share of B, so the summed gradient (and so the update) is the same whatever R.
"""

from __future__ import annotations

import json
import os

import gin
import tensorflow as tf

STRATEGIES = ("default", "mirrored", "multi_worker")


def split_cpu(num_devices: int) -> None:
    """Splits the physical CPU into `num_devices` logical devices (before TF starts)."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    existing = tf.config.get_logical_device_configuration(cpu)
    if existing and len(existing) == num_devices:
        return
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(num_devices)]
        )
    except RuntimeError:
        raise ValueError(
            f"LOGICAL_CPUS={num_devices} must be set before TensorFlow runs anything in this "
            "process (logical devices cannot change once it has started)"
        ) from None


@gin.configurable
def make_strategy(name: str = "default", logical_cpus: int = 0) -> tf.distribute.Strategy:
    """The strategy called `name`; see the module docstring."""
    if name not in STRATEGIES:
        raise ValueError(f"unknown STRATEGY {name!r}; expected one of {', '.join(STRATEGIES)}")
    if logical_cpus < 0:
        raise ValueError(f"LOGICAL_CPUS must be >= 0, got {logical_cpus}")
    if logical_cpus > 1:
        split_cpu(logical_cpus)
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        if gpus:
            return tf.distribute.MirroredStrategy([d.name for d in gpus])
        cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
        # No NCCL between CPU devices: reduce on one device and broadcast.
        return tf.distribute.MirroredStrategy(
            cpus, cross_device_ops=tf.distribute.ReductionToOneDevice()
        )
    if "TF_CONFIG" not in os.environ:
        raise ValueError(
            "STRATEGY='multi_worker' needs the TF_CONFIG environment variable "
            '(e.g. {"cluster": {"worker": ["host1:port", "host2:port"]}, '
            '"task": {"type": "worker", "index": 0}})'
        )
    try:
        json.loads(os.environ["TF_CONFIG"])
    except ValueError as error:
        raise ValueError(f"TF_CONFIG is not valid JSON: {error}") from None
    # No collective timeout: TensorFlow arms a timer thread per collective op when one
    # is set, which piles up thousands of sleeping threads per second here. A worker
    # that dies is still noticed at once: its peers' all-reduce fails to connect.
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING
    )
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes checkpoints, summaries and results."""
    resolver = strategy.cluster_resolver  # None on one machine
    if resolver is None or not resolver.task_type:
        return True
    cluster = resolver.cluster_spec().as_dict()
    if resolver.task_type == "chief":
        return True
    return resolver.task_type == "worker" and resolver.task_id == 0 and "chief" not in cluster


def replica_slice(batch_size: int) -> tuple[tf.Tensor, tf.Tensor]:
    """(start, end) of this replica's share of a global batch of `batch_size` tasks."""
    context = tf.distribute.get_replica_context()
    replicas = context.num_replicas_in_sync
    replica = tf.cast(context.replica_id_in_sync_group, tf.int32)
    return replica * batch_size // replicas, (replica + 1) * batch_size // replicas
