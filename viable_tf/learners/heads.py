"""A classifier's output layer, as an object a learner holds: the prediction network's own
(`LinearHead`, the paper's), one made per task from the support set (`PrototypeHead`,
learners/prototypes.py), or a meta-learned start copied per task (`SteppedLinearHead`).
CAVIA, MAML and VIABLE on them hold no head branches: they ask their head for the
network they need, for its per-task part of the adapted state (`AdaptedState.head`) and
for the logits.

Chosen in gin by reference:

    CAVIA.head = @PrototypeHead()
    PrototypeHead.temperature = 0.1        # and learn_temperature, prototype

A head is plain Python, not a Keras layer: a weight it has (a learned temperature) is
the learner's (`build`, through `learner_weight`, which makes it an attribute of the
learner so that checkpoints and exports hold it).

Adding a head: subclass `Head`, say whether the network keeps its output layer, and give
`empty` (the state with no support set), `start` (from the support set's features) and
`apply` (features and the per-task state to logits); weights whose shapes need the
network's are made in `build_after_network`.

Shape legend: B tasks, K support points, P points, H features, N classes.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable

import gin
import keras
import tensorflow as tf

from viable_tf.configurable import expect
from viable_tf.learners import prototypes


class Head(abc.ABC):
    """The output layer of a learner's predictions."""

    #: The name in results and HParams ('linear', 'prototypes').
    name: str = ""
    #: Whether the network keeps its own output layer (False: it ends at its last
    #: hidden layer, whose features this head maps to logits).
    network_output_layer: bool = True
    #: Whether the head has a per-task part of the adapted state (made from the support
    #: set); a learner then adapts more than its context.
    per_task: bool = False
    #: How a class's prototype is made (a prototype head's; 'mean' for any other).
    prototype: str = "mean"
    #: Why a task needs a real support point of every class, or None.
    every_class_reason: str | None = None
    #: The method a learner with this head and no inner steps is, by its usual name
    #: ('protonet', 'matching', ...): the head alone classifies. '' where the head needs
    #: the learner's inner loop, whose method then names the run.
    method_without_steps: str = ""

    def check(self, task_loss: str) -> None:
        """Raises ValueError where the head does not fit the learner's task loss (any
        fits, unless a head says otherwise)."""
        return None

    def build(self, learner: keras.layers.Layer) -> None:
        """Creates the head's weights on `learner` (before the network's): none, unless a
        head says otherwise."""
        return None

    def build_after_network(self, learner: keras.layers.Layer, network) -> None:
        """Creates the head's weights whose shapes need the network's (its feature
        dimension), after the network's own: none, unless a head says otherwise."""
        return None

    def empty(self, batch_size: tf.Tensor, network, num_classes: int) -> tuple[tf.Tensor, ...]:
        """The per-task state with no support set."""
        return ()

    def start(
        self,
        features: Callable[[], tf.Tensor],
        support_y: tf.Tensor,
        support_mask: tf.Tensor,
        num_classes: int,
    ) -> tuple[tf.Tensor, ...]:
        """The per-task state a task's inner loop starts from; `features()` gives the
        support set's features [B, K, H] (called only by a head that needs them)."""
        return ()

    @abc.abstractmethod
    def apply(self, outputs: tf.Tensor, state: tuple[tf.Tensor, ...]) -> tf.Tensor:
        """The network's outputs [B, P, ...] and the per-task state -> predictions."""


def require_classifier(head: str, task_loss: str) -> None:
    """Raises ValueError unless `task_loss` is a classifier's (a head that maps features
    to class logits needs one)."""
    if task_loss != "cross_entropy":
        raise ValueError(
            f"{head} is a classifier's output layer; it needs task_loss='cross_entropy', "
            f"got {task_loss!r}"
        )


def learner_weight(learner: keras.layers.Layer, attribute: str, **add_weight) -> tf.Variable:
    """A head's weight: created on `learner` and held as its `attribute` too, so that
    checkpoints and SavedModels keep it (a weight held only by the plain-Python head is
    trained, being the learner's, but neither saved nor exported)."""
    weight = learner.add_weight(**add_weight)
    setattr(learner, attribute, weight)
    return weight


@gin.configurable
class LinearHead(Head):
    """The prediction network's own output layer, meta-learned with it (the paper's)."""

    name = "linear"

    def apply(self, outputs, state):
        return outputs


@gin.configurable
class PrototypeHead(Head):
    """An output layer that starts, per task, at the support set's class prototypes in the
    network's feature space (Proto-MAML; learners/prototypes.py): w_c = 2 mu_c,
    b_c = -||mu_c||^2, logits / tau.

    Args:
      temperature: tau, the logits' divisor (1: the plain class-mean logits).
      learn_temperature: meta-learn log tau from `temperature`.
      prototype: how a class's support features make its prototype ('mean', 'median',
        'weighted'; prototypes.PROTOTYPES).
    """

    name = "prototypes"
    method_without_steps = "protonet"  # Snell et al. 2017
    network_output_layer = False
    per_task = True
    every_class_reason = "this model's output layer starts at each class's support mean"

    def __init__(
        self, temperature: float = 1.0, learn_temperature: bool = False, prototype: str = "mean"
    ) -> None:
        if not temperature > 0:
            raise ValueError(f"PrototypeHead.temperature must be > 0, got {temperature}")
        self.temperature = float(temperature)  # tau, or log tau's start where it is learned
        self.learn_temperature = learn_temperature
        self.prototype = prototypes.check_prototype(prototype)
        self.log_temperature: tf.Variable | None = None  # log tau, where it is learned

    def check(self, task_loss: str) -> None:
        if task_loss != "cross_entropy":
            raise ValueError(
                f"PrototypeHead is a classifier's output layer (class means); "
                f"it needs task_loss='cross_entropy', got {task_loss!r}"
            )

    def build(self, learner) -> None:
        if self.learn_temperature:
            self.log_temperature = learner_weight(
                learner,
                "temperature",  # the learner's attribute before heads were objects
                shape=(),
                initializer=keras.initializers.Constant(math.log(self.temperature)),
                name="log_head_temperature",
            )

    def empty(self, batch_size, network, num_classes):
        # No support set, no class means: every class is empty (uniform probabilities).
        kernel = tf.zeros(tf.stack([batch_size, network.feature_dim, num_classes]))
        bias = tf.fill(tf.stack([batch_size, num_classes]), prototypes.EMPTY_CLASS_BIAS)
        return (kernel, bias)

    def start(self, features, support_y, support_mask, num_classes):
        return prototypes.prototype_head(
            features(), support_y, support_mask, num_classes, self.prototype
        )

    def tau(self) -> tf.Tensor | float | None:
        """The logits' divisor: exp of the learned log tau, the fixed temperature, or None
        at the plain class-mean logits (1)."""
        if self.learn_temperature:
            return tf.exp(self.log_temperature)
        return None if self.temperature == 1.0 else self.temperature

    def apply(self, outputs, state):
        kernel, bias = state
        return prototypes.apply_head(outputs, kernel, bias, self.tau())


@gin.configurable
class SteppedLinearHead(Head):
    """A linear output layer meta-learned as a shared start and copied per task, so that
    the inner loop can step it (CAVIA's `adapt_head=True`) as MAML steps its own output
    layer, while the network below stays shared.

    Beside the prototype head it separates the two things that head gives CAVIA: an
    output layer stepped per task, and a start at the support set's class means. Without
    `adapt_head` it is CAVIA's linear output layer held in the adapted state.
    """

    name = "stepped_linear"
    network_output_layer = False
    per_task = True

    def __init__(self) -> None:
        self.kernel = self.bias = None

    def build_after_network(self, learner, network) -> None:
        shape = (network.feature_dim, learner.output_dim)  # [H, N], as keras' Dense makes it
        self.kernel = learner_weight(
            learner, "head_kernel", shape=shape, initializer="glorot_uniform", name="head_kernel"
        )
        self.bias = learner_weight(
            learner, "head_bias", shape=shape[1:], initializer="zeros", name="head_bias"
        )

    def empty(self, batch_size, network, num_classes):
        # The shared start, one copy per task; the tile keeps the meta-gradient path.
        kernel = tf.tile(self.kernel[None], tf.stack([batch_size, 1, 1]))  # [B, H, N]
        bias = tf.tile(self.bias[None], tf.stack([batch_size, 1]))  # [B, N]
        return (kernel, bias)

    def start(self, features, support_y, support_mask, num_classes):
        return self.empty(tf.shape(support_y)[0], None, num_classes)

    def apply(self, outputs, state):
        kernel, bias = state
        return prototypes.apply_head(outputs, kernel, bias)


def make_head(head: Head | None, task_loss: str) -> Head:
    """A learner's own head: `head` (None: a new `LinearHead`, the network's own output
    layer), checked against the task loss."""
    head = LinearHead() if head is None else head
    expect(
        head,
        Head,
        f"head must be a Head (learners/heads.py), such as PrototypeHead(); got {head!r}",
    )
    head.check(task_loss)
    return head


def build_network(learner, network, head: Head):
    """`network(...)` for `learner`, with its output layer or without it (its last hidden
    layer then feeds the head), and the head's weights that need the network's shapes."""
    built = network(
        input_dim=learner.input_dim,
        output_dim=learner.output_dim,
        context_dim=learner.context_dim,
        **({} if head.network_output_layer else {"output_layer": False}),
    )
    head.build_after_network(learner, built)
    return built
