"""MeTAL (Baik, Choi, Kim, Ko, Lee and Lee, "Meta-Learning with Task-Adaptive Loss Function
for Few-Shot Learning", ICCV 2021; docs/method.md §11): the inner loss is the task loss
plus two learned terms, each a network per inner step whose weights an affine adapter
modulates per task from the task's state; on CAVIA (`MeTAL`) and on MAML (`MAMLMeTAL`),
with Meta-SGD's learned step sizes on either (`learned_inner_lr`).

At inner step s, with the adapted tensors W_1..W_L (CAVIA's context phi; MAML's weights):

- task state t = [L_T on the support set, mean(W_1), ..., mean(W_L)], L + 1 numbers;
- support term: each support point's row [t, y_hat_j, y_j] (a classifier's N logits and
  one-hot label; a regressor's prediction and target), the task's rows standardised as
  one array, through the step's network, averaged; its adapter reads t standardised;
- query term (transductive, no query labels): each query's row [mean(W_1..W_L), y_hat_q,
  sum_c p_c log p_c] (no entropy for a regressor), standardised as one array, through
  the step's query network, averaged; its adapter reads the mean row;
- inner loss = L_T + support term + query term (`form=Residual()`, MeTAL's additive form;
  `Learned()` descends the learned terms alone).

The parts, in gin: `task_state` (TaskState), `adapter` (AffineAdapter, or None: the terms'
networks as they are, not task-adaptive), `per_step` (a network per step, or one shared),
`query_term` (on or off), `term_network` (TermNetwork: MeTAL's MLP, or another width), `over`
('points', MeTAL's; 'pairs', the relational form: every ordered pair of support points
for the support term, every (support, query) pair for the query term), and `form`.

Shape legend: B tasks, K support, Q query, D input dim, Y output dim, L adapted tensors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import gin
import tensorflow as tf

from viable_tf.configurable import expect, keras_configurable
from viable_tf.learners.cavia import CAVIA
from viable_tf.learners.heads import Head
from viable_tf.learners.loss_features import Learned, Residual, Support
from viable_tf.learners.maml import MAML
from viable_tf.networks.adaptive_loss import OVER, ModulatedTerm
from viable_tf.networks.prediction import PredictionNetwork
from viable_tf.ops import masked_mean, standardized, tensor_means

#: What a term's rows hold: MeTAL's ([task state, y_hat, y], standardised per task), or
#: VIABLE's point features as they are ([L_T(y_hat_j, y_j), x_j, y_hat_j, y_j]; a query's
#: [x_q, y_hat_q, its entropy]), for the relational loss with MeTAL's two ideas.
ROWS = ("metal", "relviable")


@gin.configurable
@dataclasses.dataclass(frozen=True)
class TaskState:
    """The task state the terms read: the support set's task loss and the mean of each
    adapted tensor; `standardize` (MeTAL's) standardises it over its own entries before
    the support term's adapter reads it."""

    standardize: bool = True


@gin.configurable
@dataclasses.dataclass(frozen=True)
class AffineAdapter:
    """Per task and step, W' = (1 + a m) W + b o for each tensor W of the step's term
    network, (m, o) from Linear(S, S), ReLU, Linear(S, 2T) on the task state, a and b
    meta-learned scalars starting at 0."""


@gin.configurable
@dataclasses.dataclass(frozen=True)
class TermNetwork:
    """Each term's network: MeTAL's Linear(F, F), ReLU, Linear(F, 1) (`hidden_units`
    None), or the hidden layers given; started as MeTAL's (`init='metal'`) or as VIABLE's
    loss networks (`'torch'`); `output_init='zeros'` starts the terms flat."""

    hidden_units: tuple[int, ...] | None = None
    activation: str = "relu"
    init: str = "metal"
    output_init: str = "init"


class TaskAdaptiveInnerLoss:
    """The inner loss as MeTAL's: mixed into a gradient learner (before its base class).
    It takes its parts and hands the rest to the base learner; each learner made with it
    names them all."""

    def __init__(
        self,
        *,
        task_state: TaskState | None = None,
        adapter: AffineAdapter | None = AffineAdapter(),
        per_step: bool = True,
        query_term: bool = True,
        term_network: TermNetwork | None = None,
        over: str = "points",
        rows: str = "metal",
        form: Learned | Residual | None = None,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if not (self.capabilities.steps_state and self.num_inner_steps >= 1):
            raise ValueError(
                f"MeTAL's loss on {super().base_name} with {self.num_inner_steps} inner "
                "steps has no adapted parameters to summarise: its task state is the means of "
                "the tensors the inner loop steps (CAVIA's context, MAML's weights)"
            )
        self.task_state = TaskState() if task_state is None else task_state
        expect(self.task_state, TaskState, f"task_state must be TaskState(), got {task_state!r}")
        if adapter is not None:
            expect(
                adapter, AffineAdapter, f"adapter must be AffineAdapter() or None, got {adapter!r}"
            )
        self.adapter = adapter
        self.term_network = TermNetwork() if term_network is None else term_network
        expect(
            self.term_network,
            TermNetwork,
            f"term_network must be TermNetwork(), got {term_network!r}",
        )
        if over not in OVER:
            raise ValueError(f"over must be one of {OVER}, got {over!r}")
        self.over = over
        if rows not in ROWS:
            raise ValueError(f"rows must be one of {ROWS}, got {rows!r}")
        self.rows = rows
        self.per_step = per_step
        self.query_term = query_term
        self.form = Residual() if form is None else form
        expect(
            self.form, (Learned, Residual), f"form must be Learned() or Residual(), got {form!r}"
        )
        self.capabilities = dataclasses.replace(self.capabilities, reads_queries=query_term)
        # L: the tensors the inner loop steps, as a one-task state shows them.
        start = self.initial_state(1)
        self.num_adapted = sum(start.in_parts(self.capabilities.adapted_parts))
        y, entropy = self.output_dim, (1 if self.is_classifier else 0)
        if rows == "metal":
            support_width = self.num_adapted + 1 + 2 * y  # [t, y_hat, y]
            query_width = self.num_adapted + y + entropy  # [means, y_hat, entropy]
        else:
            support_width = 1 + self.input_dim + 2 * y  # [L_T, x, y_hat, y]
            query_width = self.input_dim + y + entropy  # [x, y_hat, entropy]
        networks = self.num_inner_steps if per_step else 1
        options = dataclasses.asdict(self.term_network)
        self.support_term = ModulatedTerm(
            input_dim=support_width,
            num_networks=networks,
            adapter_dim=(self.num_adapted + 1) if adapter is not None else 0,
            over=over,
            right_dim=support_width,
            name="support_term",
            **options,
        )
        self.query_network = None
        if query_term:
            self.query_network = ModulatedTerm(
                input_dim=support_width if over == "pairs" else query_width,
                num_networks=networks,
                adapter_dim=query_width if adapter is not None else 0,
                over=over,
                right_dim=query_width,
                name="query_term",
                **options,
            )

    @property
    def metal_name(self) -> str:
        """On MeTAL's rows: 'metal' ('relmetal' over pairs), then what is off: '_static'
        (no adapter), '_support' (no query term), '_shared' (one network for every step).
        On VIABLE's rows: 'simviable' ('relviable' over pairs), then what is on:
        '_adaptive' (the adapter), '_query' (the query term), and '_shared'."""
        shared = "" if self.per_step else "_shared"
        if self.rows == "relviable":
            return (
                ("rel" if self.over == "pairs" else "sim")
                + "viable"
                + ("_adaptive" if self.adapter is not None else "")
                + ("_query" if self.query_term else "")
                + shared
            )
        return (
            ("rel" if self.over == "pairs" else "")
            + "metal"
            + ("" if self.adapter is not None else "_static")
            + ("" if self.query_term else "_support")
            + shared
        )

    def hparams(self) -> dict[str, str | int | float | bool]:
        return {
            **super().hparams(),
            "activation": self.term_network.activation,
            "over": self.over,
            "rows": self.rows,
            "task_adaptive": self.adapter is not None,
            "query_term": self.query_term,
            "per_step": self.per_step,
            **self.form.hparams(),
        }

    def inner_loss(
        self, state, support_x, support_y, support_mask, *, step=0, query_x=None
    ) -> tf.Tensor:
        """L_T + the support term + the query term at inner step `step` [B]."""
        if self.query_term and query_x is None:
            raise ValueError(f"{self.method_name}'s query term needs the task's query_x")
        network = step if self.per_step else 0
        y_hat = self.predict(state, support_x)  # [B, K, Y]
        support = Support(self, state, support_x, support_y, support_mask, y_hat, support_x)
        task_loss = masked_mean(self.task_loss(y_hat, support_y), support_mask, axis=1)  # [B]
        stepped = [
            t
            for t, part in zip(
                state.tensors(), state.in_parts(self.capabilities.adapted_parts), strict=True
            )
            if part
        ]
        means = tensor_means(stepped)  # [B, L]
        task = tf.concat([task_loss[:, None], means], axis=1)  # t [B, L + 1]
        adapter_state = task
        if self.task_state.standardize:
            adapter_state = standardized(task, tf.ones_like(task, tf.bool), axes=[1])
        k = tf.shape(support_x)[1]
        labels = support_y
        if self.is_classifier:
            labels = tf.one_hot(support_y, self.output_dim, dtype=y_hat.dtype)  # [B, K, N]
        if self.rows == "metal":
            rows = tf.concat([tf.tile(task[:, None, :], [1, k, 1]), y_hat, labels], axis=-1)
            rows = standardized(rows, support_mask[:, :, None], axes=[1, 2])  # [B, K, L+1+2Y]
        else:  # VIABLE's point features, as they are: [L_T(y_hat_j, y_j), x_j, y_hat_j, y_j]
            point_loss = self.task_loss(y_hat, support_y)[..., None]  # [B, K, 1]
            rows = tf.concat([point_loss, support_x, y_hat, labels], axis=-1)
        if self.over == "points":
            learned = self.support_term.points(network, adapter_state, rows, support_mask)
        else:
            learned = self.support_term.pairs(
                network, adapter_state, rows, support_mask, rows, support_mask
            )
        if self.query_term:
            args = (network, state, means, rows, support_mask, query_x)
            query = self._query_term_or_zero(learned.dtype, *args)
            # A task with no real support point is not adapted (the learner contract).
            has_support = tf.reduce_any(support_mask, axis=1)
            learned += tf.where(has_support, query, tf.zeros_like(query))
        return self.form(learned, support)  # [B]

    def _query_term_or_zero(self, dtype, *args):
        """The query term [B], or 0 for a request with no query point (Q = 0) without running
        the network on the empty batch: on oneDNN, TensorFlow's max-pooling gradient aborts
        the process on one (a served request with no query drawing took the server down).
        Where Q is static, as in training, the term is computed as it always was."""
        query_x = args[-1]

        def none():
            return tf.zeros([tf.shape(query_x)[0]], dtype)

        if query_x.shape[1] is not None:
            return self._query_term(*args) if query_x.shape[1] else none()
        return tf.cond(tf.shape(query_x)[1] > 0, lambda: self._query_term(*args), none)

    def _query_term(self, network, state, means, support_rows, support_mask, query_x):
        """The transductive term [B] from the queries' rows (no query labels)."""
        q = tf.shape(query_x)[1]
        y_hat = self.predict(state, query_x)  # [B, Q, Y]
        first = tf.tile(means[:, None, :], [1, q, 1]) if self.rows == "metal" else query_x
        parts = [first, y_hat]
        if self.is_classifier:
            log_p = tf.nn.log_softmax(y_hat)
            parts.append(tf.reduce_sum(tf.exp(log_p) * log_p, axis=-1, keepdims=True))
        real = tf.ones(tf.shape(query_x)[:2], tf.bool)  # [B, Q]
        rows = tf.concat(parts, axis=-1)
        if self.rows == "metal":
            rows = standardized(rows, real[:, :, None], axes=[1, 2])
        adapter_state = masked_mean(rows, real[:, :, None], axis=1)  # the mean row [B, F_q]
        if self.over == "points":
            return self.query_network.points(network, adapter_state, rows, real)
        return self.query_network.pairs(
            network, adapter_state, support_rows, support_mask, rows, real
        )


@keras_configurable
class MeTAL(TaskAdaptiveInnerLoss, CAVIA):
    """CAVIA whose inner loop descends MeTAL's task-adaptive loss: CAVIA's arguments
    (its task state is [L_T, mean(phi)]), and the loss's parts (TaskAdaptiveInnerLoss)."""

    def __init__(
        self,
        *,
        input_dim: int,
        output_dim: int,
        context_dim: int = 5,
        num_inner_steps: int = 1,
        inner_lr: float = 1.0,
        first_order: bool = False,
        task_loss: str = "mse",
        inner_task_loss: str | None = None,
        learned_inner_lr: bool = False,
        network: Callable[..., PredictionNetwork] = PredictionNetwork,
        head: Head | None = None,
        adapt_head: bool = False,
        task_state: TaskState | None = None,
        adapter: AffineAdapter | None = AffineAdapter(),
        per_step: bool = True,
        query_term: bool = True,
        term_network: TermNetwork | None = None,
        over: str = "points",
        rows: str = "metal",
        form: Learned | Residual | None = None,
    ) -> None:
        super().__init__(
            input_dim=input_dim,
            output_dim=output_dim,
            context_dim=context_dim,
            num_inner_steps=num_inner_steps,
            inner_lr=inner_lr,
            first_order=first_order,
            task_loss=task_loss,
            inner_task_loss=inner_task_loss,
            learned_inner_lr=learned_inner_lr,
            network=network,
            head=head,
            adapt_head=adapt_head,
            task_state=task_state,
            adapter=adapter,
            per_step=per_step,
            query_term=query_term,
            term_network=term_network,
            over=over,
            rows=rows,
            form=form,
        )

    @property
    def base_name(self) -> str:  # type: ignore[override]
        """'metal_cavia'; on VIABLE's rows, VIABLE's name ('relviable_adaptive_query')."""
        return self.metal_name if self.rows == "relviable" else f"{self.metal_name}_cavia"


@keras_configurable
class MAMLMeTAL(TaskAdaptiveInnerLoss, MAML):
    """MAML whose inner loop over all prediction-network weights descends MeTAL's
    task-adaptive loss (its task state: L_T and the mean of each weight tensor), as
    MeTAL's own code does; MAML's arguments, and the loss's parts."""

    def __init__(
        self,
        *,
        input_dim: int,
        output_dim: int,
        context_dim: int = 0,
        num_inner_steps: int = 1,
        inner_lr: float = 0.1,
        first_order: bool = False,
        task_loss: str = "mse",
        inner_task_loss: str | None = None,
        learned_inner_lr: bool = False,
        network: Callable[..., PredictionNetwork] = PredictionNetwork,
        head: Head | None = None,
        task_state: TaskState | None = None,
        adapter: AffineAdapter | None = AffineAdapter(),
        per_step: bool = True,
        query_term: bool = True,
        term_network: TermNetwork | None = None,
        over: str = "points",
        rows: str = "metal",
        form: Learned | Residual | None = None,
    ) -> None:
        super().__init__(
            input_dim=input_dim,
            output_dim=output_dim,
            context_dim=context_dim,
            num_inner_steps=num_inner_steps,
            inner_lr=inner_lr,
            first_order=first_order,
            task_loss=task_loss,
            inner_task_loss=inner_task_loss,
            learned_inner_lr=learned_inner_lr,
            network=network,
            head=head,
            task_state=task_state,
            adapter=adapter,
            per_step=per_step,
            query_term=query_term,
            term_network=term_network,
            over=over,
            rows=rows,
            form=form,
        )

    @property
    def base_name(self) -> str:  # type: ignore[override]
        """'metal_maml'; on VIABLE's rows, 'maml_' and VIABLE's name."""
        if self.rows == "relviable":
            return f"maml_{self.metal_name}"
        return f"{self.metal_name}_maml"
