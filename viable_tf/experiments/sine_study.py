"""What the sine reproduction runs (docs/method.md §4): the tables' rows, the variations of the
reproduction study, and the settings they share. Plain data, read by the driver
(`sine_paper`) and the report (`sine_report`)."""

from __future__ import annotations

from typing import NamedTuple

CONTEXT_DIMS = (1, 2, 3, 4, 5)
EVAL_SHOTS_B = (0, 1, 2, 3, 4, 20)
LONG_STEPS = 100_000


class Row(NamedTuple):
    """One method of the tables: its config at K = 10 and, for (b), at K ~ U{0..20}."""

    label: str
    config: str
    vark_config: str | None


#: The tables' rows. The paper names no activation for the loss networks, so both
#: VIABLE variants are run with ReLU and with tanh hidden units (stable config names,
#: whatever the shipped default is); every row uses the configs' default init ('torch').
ROWS = {
    "maml": Row("MAML", "sine/maml.gin", None),
    "cavia": Row("CAVIA", "sine/cavia.gin", "sine/cavia_vark.gin"),
    "simviable_relu": Row(
        "simVIABLE (ReLU)", "sine/simviable_relu.gin", "sine/simviable_vark_relu.gin"
    ),
    "simviable_tanh": Row(
        "simVIABLE (tanh)", "sine/simviable_tanh.gin", "sine/simviable_vark_tanh.gin"
    ),
    "relviable_relu": Row(
        "relVIABLE (ReLU)", "sine/relviable_relu.gin", "sine/relviable_vark_relu.gin"
    ),
    "relviable_tanh": Row(
        "relVIABLE (tanh)", "sine/relviable_tanh.gin", "sine/relviable_vark_tanh.gin"
    ),
}
ROWS_A = tuple(ROWS)
ROWS_B = tuple(key for key, row in ROWS.items() if row.vark_config)
#: Trained for LONG_STEPS at every seed: it was still improving at 50,000 updates.
LONG_ROW = "relviable_tanh"


class Variation(NamedTuple):
    """One change a careful reproducer would question, trained at C = 5, seed 0, on
    the row `base` of table (a) (which it is compared with)."""

    description: str
    params: list[str]
    base: str = "relviable_tanh"


KERAS_INIT = ["INIT='keras'"]

#: The reproduction study: each variation changes one thing of its base row.
VARIATIONS = {
    "keras_init_relu": Variation(
        "Keras init (Glorot kernels, zero biases)", KERAS_INIT, "relviable_relu"
    ),
    "keras_init_tanh": Variation("Keras init (Glorot kernels, zero biases)", KERAS_INIT),
    "simviable_keras_init": Variation(
        "Keras init (Glorot kernels, zero biases)", KERAS_INIT, "simviable_relu"
    ),
    "cavia_keras_init": Variation("Keras init (Glorot kernels, zero biases)", KERAS_INIT, "cavia"),
    "keras_init_symmetric_relu": Variation(
        "Keras init with W_b = W_a at the start (the previous code's start)",
        [*KERAS_INIT, "RelationLossNetwork.symmetric_init=True"],
        "relviable_relu",
    ),
    "symmetric_relu": Variation(
        "W_b = W_a at the start", ["RelationLossNetwork.symmetric_init=True"], "relviable_relu"
    ),
    "softplus_hidden": Variation(
        "softplus hidden units", ["RelationLossNetwork.activation='softplus'"], "relviable_relu"
    ),
    "simviable_softplus_hidden": Variation(
        "softplus hidden units", ["SimpleLossNetwork.activation='softplus'"], "simviable_relu"
    ),
    "softplus_output": Variation(
        "loss output through softplus (non-negative)",
        ["RelationLossNetwork.output_activation='softplus'"],
        "relviable_relu",
    ),
    "double_length_relu": Variation("100,000 meta-updates", ["NUM_STEPS=100000"], "relviable_relu"),
    "no_x_in_pairs": Variation(
        "pair features without x", ["RelationLossNetwork.include_inputs=False"]
    ),
    "no_task_loss_in_pairs": Variation(
        "pair features without L_T", ["VIABLE.features=[@Outputs(), @Labels(), @Inputs()]"]
    ),
    "input_scale_5": Variation(
        "loss-network inputs scaled by 1/5 (L_T by 1/25)",
        [f"{part}.scale=5.0" for part in ("TaskLoss", "Outputs", "Labels", "Inputs")],
    ),
    "no_clipping": Variation("no meta-gradient clipping", ["OptimizerChain.transforms=[]"]),
    "two_inner_steps": Variation("2 inner steps", ["VIABLE.num_inner_steps=2"]),
    "simviable_two_inner_steps": Variation(
        "2 inner steps", ["VIABLE.num_inner_steps=2"], "simviable_tanh"
    ),
    "cavia_two_inner_steps": Variation(
        "2 inner steps (control)", ["CAVIA.num_inner_steps=2"], "cavia"
    ),
}


def selected(keys: tuple[str, ...], rows: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(key for key in keys if key in rows)
