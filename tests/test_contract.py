"""One contract over every learner and output layer the shipped configs build: adapt gives
an AdaptedState whose every tensor is per task, predict gives [B, P, Y], padded support
points change nothing, a task with no support point gets finite predictions that no
masked value moves, the meta-loss is a finite scalar whose gradient reaches every weight
(those unreached by design aside). A second test holds the cases to the configs: every
learner, head, loss network and Meta-SGD combination a file under gin/ binds is a case.

Learner-specific behaviour stays beside each learner (test_learners.py, test_leo.py,
test_comparators.py, test_prototypes.py, test_stepped_head.py)."""

import glob
import os

import gin
import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import unreached_by_design
from fake_leo import feature_episodes

from viable_tf import config as gin_config
from viable_tf.learners import (
    CAVIA,
    LEO,
    LEOVIABLE,
    MAML,
    MAMLVIABLE,
    VIABLE,
    AdaptedState,
    MAMLMeTAL,
    MatchingHead,
    MeTAL,
    PrototypeHead,
    RidgeHead,
    SteppedLinearHead,
    SVMHead,
)
from viable_tf.networks import AttentionLossNetwork, RelationLossNetwork, SimpleLossNetwork
from viable_tf.tasks import SineTasks, TaskBatch, seed_for

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N, D = 4, 16  # classification: N ways of D-dimensional features
LOSS_NETWORKS = {
    "simple": SimpleLossNetwork,
    "relation": RelationLossNetwork,
    "attention": AttentionLossNetwork,
}


def _small(name):
    network = LOSS_NETWORKS[name]
    return lambda: network(hidden_units=(16,))


def _sine(cls, **kw):
    return lambda: cls(input_dim=1, output_dim=1, **kw)


def _classifier(cls, **kw):
    return lambda: cls(input_dim=D, output_dim=N, task_loss="cross_entropy", **kw)


def _leo(cls, **kw):
    settings = {"num_latents": 8, "num_latent_steps": 2, "num_finetuning_steps": 2}
    return lambda: cls(input_dim=D, output_dim=N, **settings, **kw)


#: name -> (task kind, a builder). The name is the learner's method_name, then its head.
CASES = {
    # regression on sine tasks, the network's own output layer
    "cavia": ("sine", _sine(CAVIA)),
    "maml": ("sine", _sine(MAML)),
    "simviable": ("sine", _sine(VIABLE, loss_network=_small("simple"))),
    "relviable": ("sine", _sine(VIABLE, loss_network=_small("relation"))),
    "attviable": ("sine", _sine(VIABLE, loss_network=_small("attention"))),
    "maml_simviable": ("sine", _sine(MAMLVIABLE, loss_network=_small("simple"))),
    "maml_relviable": ("sine", _sine(MAMLVIABLE, loss_network=_small("relation"))),
    "metasgd_cavia": ("sine", _sine(CAVIA, learned_inner_lr=True)),
    "metasgd_maml": ("sine", _sine(MAML, learned_inner_lr=True)),
    "metasgd_simviable": (
        "sine",
        _sine(VIABLE, loss_network=_small("simple"), learned_inner_lr=True),
    ),
    "metasgd_relviable": (
        "sine",
        _sine(VIABLE, loss_network=_small("relation"), learned_inner_lr=True),
    ),
    # classification, the network's output layer
    "cavia/linear": ("episodes", _classifier(CAVIA)),
    "relviable/linear": ("episodes", _classifier(VIABLE, loss_network=_small("relation"))),
    "maml/linear": ("episodes", _classifier(MAML)),
    # classification, per-task output layers
    "cavia/prototypes": ("episodes", _classifier(CAVIA, head=PrototypeHead())),
    "cavia/prototypes, no steps": (  # the Prototypical Network
        "episodes",
        _classifier(CAVIA, num_inner_steps=0, head=PrototypeHead()),
    ),
    "simviable/prototypes": (
        "episodes",
        _classifier(VIABLE, loss_network=_small("simple"), head=PrototypeHead()),
    ),
    "relviable/prototypes": (
        "episodes",
        _classifier(VIABLE, loss_network=_small("relation"), head=PrototypeHead()),
    ),
    "attviable/prototypes": (
        "episodes",
        _classifier(VIABLE, loss_network=_small("attention"), head=PrototypeHead()),
    ),
    "maml/prototypes": ("episodes", _classifier(MAML, head=PrototypeHead())),
    "maml_simviable/prototypes": (
        "episodes",
        _classifier(MAMLVIABLE, loss_network=_small("simple"), head=PrototypeHead()),
    ),
    "maml_relviable/prototypes": (
        "episodes",
        _classifier(MAMLVIABLE, loss_network=_small("relation"), head=PrototypeHead()),
    ),
    "cavia/stepped": ("episodes", _classifier(CAVIA, head=SteppedLinearHead())),
    "simviable/stepped": (
        "episodes",
        _classifier(VIABLE, loss_network=_small("simple"), head=SteppedLinearHead()),
    ),
    "relviable/stepped": (
        "episodes",
        _classifier(VIABLE, loss_network=_small("relation"), head=SteppedLinearHead()),
    ),
    "cavia/matching": ("episodes", _classifier(CAVIA, num_inner_steps=0, head=MatchingHead())),
    "cavia/matching, full context": (
        "episodes",
        _classifier(
            CAVIA, num_inner_steps=0, head=MatchingHead(full_context=True, processing_steps=2)
        ),
    ),
    "cavia/ridge": ("episodes", _classifier(CAVIA, num_inner_steps=0, head=RidgeHead())),
    "cavia/svm": (
        "episodes",
        _classifier(CAVIA, num_inner_steps=0, head=SVMHead(num_iterations=20)),
    ),
    # MeTAL: the task-adaptive learned loss on CAVIA and MAML (with its query term)
    "metal_cavia": ("sine", _sine(MeTAL)),
    "metal_maml": ("sine", _sine(MAMLMeTAL)),
    "metasgd_metal_cavia": ("sine", _sine(MeTAL, learned_inner_lr=True)),
    "metasgd_metal_maml": ("sine", _sine(MAMLMeTAL, learned_inner_lr=True)),
    "relmetal_cavia": ("sine", _sine(MeTAL, over="pairs")),
    "metal_cavia/linear": ("episodes", _classifier(MeTAL, num_inner_steps=2)),
    "metal_maml/linear": ("episodes", _classifier(MAMLMeTAL, num_inner_steps=2)),
    "relmetal_cavia/linear": ("episodes", _classifier(MeTAL, over="pairs")),
    "metal_maml/prototypes": ("episodes", _classifier(MAMLMeTAL, head=PrototypeHead())),
    # LEO: its own encoder, decoder and classifier
    "leo": ("episodes", _leo(LEO)),
    "leo_simviable": ("episodes", _leo(LEOVIABLE, loss_network=_small("simple"))),
    "leo_relviable": ("episodes", _leo(LEOVIABLE, loss_network=_small("relation"))),
    "leo_relviable_ft": (
        "episodes",
        _leo(LEOVIABLE, loss_network=_small("relation"), learned_finetuning=True),
    ),
}


def _episodes(b=3) -> TaskBatch:
    return feature_episodes(b=b, shots=2, queries=3, seed=0, ways=N, dim=D)


def _batch(kind: str) -> TaskBatch:
    if kind == "sine":
        return SineTasks(num_support=6, num_query=5).sample(seed_for(0, 0), 3)
    return _episodes()


def _padded(batch: TaskBatch, kind: str, extra: int = 3) -> TaskBatch:
    """The batch with `extra` masked support points of huge values and stray labels."""
    b = batch.support_x.shape[0]
    garbage_x = tf.fill([b, extra, batch.support_x.shape[-1]], 1e6)
    if kind == "sine":
        garbage_y = tf.fill([b, extra, 1], -1e6)
    else:
        garbage_y = tf.constant(np.resize([N + 3, -3, 2], (b, extra)), tf.int32)
    return batch._replace(
        support_x=tf.concat([batch.support_x, garbage_x], 1),
        support_y=tf.concat([batch.support_y, garbage_y], 1),
        support_mask=tf.concat([batch.support_mask, tf.zeros([b, extra], tf.bool)], 1),
    )


def _adapted_predictions(learner, batch: TaskBatch) -> tf.Tensor:
    state = learner.adapt(
        batch.support_x, batch.support_y, batch.support_mask, query_x=batch.query_x
    )
    return learner.predict(state, batch.query_x)


#: The cases whose head classifies alone (no inner steps): named by that method in results.
ALONE = {
    "cavia/prototypes, no steps": "protonet",
    "cavia/matching": "matching",
    "cavia/matching, full context": "matching_fce",
    "cavia/ridge": "r2d2",
    "cavia/svm": "metaoptnet_svm",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_learner_contract(name):
    kind, build = CASES[name]
    keras.utils.set_random_seed(3)
    learner = build()
    assert learner.method_name == ALONE.get(name, name.split("/")[0])
    batch = _batch(kind)
    b, p = batch.query_x.shape[:2]
    output_dim = 1 if kind == "sine" else N

    # adapt -> a state of per-task tensors; predict -> [B, P, Y], finite
    state = learner.adapt(
        batch.support_x, batch.support_y, batch.support_mask, query_x=batch.query_x
    )
    assert isinstance(state, AdaptedState)
    assert all(t.shape[0] == b for t in tf.nest.flatten(state))
    predictions = learner.predict(state, batch.query_x)
    assert predictions.shape == (b, p, output_dim)
    assert np.all(np.isfinite(predictions))

    # padded support points (masked, huge values, stray labels) change nothing
    padded = _padded(batch, kind)
    np.testing.assert_allclose(
        _adapted_predictions(learner, padded), predictions, rtol=1e-4, atol=1e-5
    )

    # no support point: finite predictions, the same whatever the masked points hold
    empty = batch._replace(support_mask=tf.zeros_like(batch.support_mask))
    no_support = _adapted_predictions(learner, empty)
    assert np.all(np.isfinite(no_support))
    np.testing.assert_allclose(
        _adapted_predictions(learner, _padded(empty, kind)), no_support, rtol=1e-5, atol=1e-6
    )

    # the meta-loss: a finite scalar, the same with padding, reaching every weight
    with tf.GradientTape() as tape:
        loss, metrics = learner.meta_loss(batch)
    assert loss.shape == () and np.isfinite(loss)
    assert all(np.all(np.isfinite(value)) for value in metrics.values())
    np.testing.assert_allclose(learner.meta_loss(padded)[0], loss, rtol=1e-4)
    variables = learner.trainable_variables
    assert variables
    unreached = unreached_by_design(learner)
    for variable, grad in zip(variables, tape.gradient(loss, variables), strict=True):
        if id(variable) in unreached:
            continue
        assert grad is not None, f"{variable.path} gets no meta-gradient"
        assert np.all(np.isfinite(tf.convert_to_tensor(grad))), variable.path


def _built_combinations(learner) -> tuple[str, str, str | None, bool]:
    """(learner, head, loss network, Meta-SGD); LEO has no head and no Meta-SGD of its own
    (a gradient learner's), 'none' and False."""
    loss_network = getattr(learner, "loss_network", None)
    head = getattr(learner, "head", None)
    return (
        type(learner).__name__,
        "none" if head is None else type(head).__name__,
        None if loss_network is None else type(loss_network).__name__,
        getattr(learner, "learned_inner_lr", False),
    )


def _reference_name(value) -> str | None:
    """The configurable a gin binding references (`@X` or `@X()`), or None."""
    return getattr(value, "configurable", None) and value.configurable.name


def _configured_combinations() -> set[tuple[str, str, str | None, bool]]:
    """(learner, head, loss network, Meta-SGD) of every shipped config, read by gin."""
    import viable_tf.training  # noqa: F401  (registers Trainer and the rest)

    found = set()
    for path in sorted(glob.glob(os.path.join(REPO, "gin", "**", "*.gin"), recursive=True)):
        gin.clear_config()
        gin_config.parse([path], [])
        try:
            learner = _reference_name(gin.query_parameter("Trainer.learner"))
        except ValueError:
            continue  # a fragment other configs include
        if learner is None:
            continue

        def bound(parameter, default=None, learner=learner):
            try:
                return gin.query_parameter(f"{learner}.{parameter}")
            except ValueError:
                return default

        head = _reference_name(bound("head")) or "LinearHead"
        if learner in ("LEO", "LEOVIABLE"):
            head = "none"  # LEO decodes its classifier; it takes no head
        loss_network = _reference_name(bound("loss_network"))
        if loss_network is None and learner in ("VIABLE", "MAMLVIABLE", "LEOVIABLE"):
            loss_network = "RelationLossNetwork"  # their default
        found.add((learner, head, loss_network, bool(bound("learned_inner_lr", False))))
    gin.clear_config()
    return found


def test_every_combination_the_configs_build_is_a_case():
    built = set()
    for _, build in CASES.values():
        keras.utils.set_random_seed(0)
        built.add(_built_combinations(build()))
    configured = _configured_combinations()
    assert len(configured) >= 10, configured  # the configs were read
    missing = configured - built
    assert not missing, f"configs build combinations no contract case covers: {sorted(missing)}"
