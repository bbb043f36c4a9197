"""The results pages' tables by name (TABLES), as definitions over the records' keys;
the verdicts are results/verdicts.py's. results/render.py writes both into the pages;
results/tables.py says how each kind renders."""

from __future__ import annotations

from results.tables import Costs, Paired, Table

#: What tells the two runs of one sine cell apart: the reproduction's run (benchmark sine)
#: and its rerun with each test task's MSE for pairing (sine_paired).
FIRST_RUNS = "method (the reproduction's runs)"
RERUNS = "method (reruns, with per-task MSEs)"


def _sine(rows, columns, extra=()):
    return Table("sine", columns, rows, corner=FIRST_RUNS, best="min", extra=list(extra))


SINE_ROWS = [
    "maml",
    "cavia",
    "simviable_relu",
    "simviable_tanh",
    "relviable_relu",
    "relviable_tanh",
]
PAPER_C5 = [("the paper, C = 5", "paper_sine", "C5_K10")]
FROZEN_ROWS = [
    "cavia",
    "cavia_proto",
    "cavia_cosine",
    "simviable",
    "simviable_proto",
    "simviable_cosine",
    "relviable_proto",
    "attviable_proto",
    "maml_proto",
    "maml_simviable_proto",
    "nearest_class_mean",
]
WAYS = [
    ("5way1shot", "5-way 1-shot"),
    ("5way5shot", "5-way 5-shot"),
    ("20way1shot", "20-way 1-shot"),
]
#: The paper's comparators on the image protocol (method §10), with their row labels
#: while they train.
COMPARATORS = {
    "metasgd_cavia": "Meta-SGD on CAVIA",
    "metasgd_simviable": "simVIABLE at Meta-SGD's step",
    "metasgd_maml": "Meta-SGD on MAML",
    "matching": "Matching Networks",
    "matching_tau": "Matching Networks, cosine / 0.1",
    "matching_fce": "Matching Networks, full context embeddings",
    "matching_fce_tau": "Matching Networks, full context embeddings, cosine / 0.1",
    "r2d2": "R2-D2 (ridge head)",
    "metaoptnet_svm": "MetaOptNet-SVM",
}
IMAGE_ROWS = [
    "protonet",
    "cavia",
    "simviable",
    "relviable",
    "relviable_tanh64",
    "maml",
    "maml_simviable",
    "simviable_residual",
    "relviable_tanh64_residual",
    "cavia_proto",
    "simviable_proto",
    "cavia_stepped",
    "simviable_stepped_residual",
    "relviable_stepped_residual",
    *COMPARATORS,
    "nearest_class_mean",
]
E2E = "omniglot_images"
#: Sine runs of one commit with their per-task MSEs, for paired comparisons.
SP = "sine_paired"
#: The relation network's candidate options (lab/sine_candidates.py): method suffix, label.
CANDIDATES = {
    "": "",
    "_set_readout": ", set-level readout",
    "_loss_mean": ", task loss as the set's mean",
    "_loss_both": ", task loss per point and the set's mean",
}

TABLES = {
    "sine_by_context": _sine(
        SINE_ROWS, [(f"C{c}_K10_seed0", f"C = {c}") for c in range(1, 6)], PAPER_C5
    ),
    "sine_by_support": _sine(
        [
            "cavia",
            "simviable_relu",
            "simviable_tanh",
            "relviable_relu",
            "relviable_tanh",
            "relviable_tanh_loss_mean",
        ],
        [(f"vark_K{k}_seed0", f"K = {k}") for k in (0, 1, 2, 3, 4, 20)],
        [("the paper", "paper_sine", "vark")],
    ),
    "sine_seeds": _sine(
        [
            *SINE_ROWS[1:],
            "relviable_tanh_100k",
            "attviable",
            "maml_plain",
            "maml_simviable",
            "maml_relviable",
        ],
        [(f"C5_K10_seed{s}", f"seed {s}") for s in (0, 1, 2)],
        PAPER_C5,
    ),
    "frozen_features": Table("omniglot_features", WAYS, FROZEN_ROWS, best="max"),
    "leo": Table(
        "omniglot_features_leo",
        WAYS,
        [
            "leo",
            "leo_simviable",
            "leo_relviable",
            "cavia_proto",
            "maml_proto",
            "nearest_class_mean",
        ],
        best="max",
    ),
    "images": Table(E2E, WAYS, IMAGE_ROWS, best="max"),
    # Omniglot read as an image folder by two routes: the end-to-end driver's configs
    # (gin/omniglot_conv/) and the image-folder configs any folder takes (gin/images/ with
    # images/omniglot.gin), two trainings by the same patience rule. The earlier form of
    # the data (l2-normalised pixels) no longer has a cell here: the driver's cell was
    # trained again on the image folder, and its record names the earlier-form run.
    "image_folder_route": Table(
        E2E,
        [("5way1shot", "5-way 1-shot, the end-to-end driver")],
        ["protonet"],
        extra=[("5-way 1-shot, `images/` configs", "omniglot_image_folder", "5way1shot")],
    ),
    "image_folder_costs": Costs("omniglot_image_folder", "5way1shot", ["protonet", "cavia"]),
    "images_paired": Paired(
        [
            (E2E, "5way1shot", "simviable", "cavia"),
            (E2E, "5way5shot", "simviable", "cavia"),
            (E2E, "5way5shot", "relviable_tanh64", "cavia"),
            (E2E, "5way5shot", "simviable_proto", "protonet"),
            (E2E, "5way1shot", "maml_simviable", "maml"),
            (E2E, "5way5shot", "maml_simviable", "maml"),
            (E2E, "20way1shot", "maml_simviable", "maml"),
            (E2E, "5way1shot", "simviable_proto", "cavia_proto"),
            (E2E, "20way1shot", "relviable_tanh64_residual", "cavia"),
            (E2E, "20way1shot", "simviable_residual", "cavia"),
            (E2E, "20way1shot", "simviable_stepped_residual", "cavia_stepped"),
            (E2E, "20way1shot", "relviable_stepped_residual", "cavia_stepped"),
        ]
    ),
    "images_comparators_paired": Paired(
        [
            (E2E, setting, a, b)
            for setting in ("5way1shot", "5way5shot", "20way1shot")
            for a, b in (
                ("r2d2", "protonet"),
                ("metaoptnet_svm", "protonet"),
                ("metaoptnet_svm", "r2d2"),
                ("metaoptnet_svm_normalized", "metaoptnet_svm"),
                ("matching", "protonet"),
                ("matching_tau", "protonet"),
                ("matching_fce", "matching"),
                ("matching_fce", "protonet"),
                ("matching_fce_tau", "matching_fce"),
                ("matching_tau", "matching"),
                ("matching_fce_tau", "matching_tau"),
                ("matching_fce_tau", "protonet"),
                ("r2d2", "matching_fce_tau"),
                ("metasgd_cavia", "cavia"),
                ("simviable", "metasgd_cavia"),
                ("metasgd_simviable", "simviable"),
                ("metasgd_simviable", "metasgd_cavia"),
                ("relviable_tanh64_residual", "metasgd_cavia"),
                ("metasgd_maml", "maml"),
                ("maml_simviable", "metasgd_maml"),
                ("metasgd_maml", "simviable"),
                ("maml_simviable", "metaoptnet_svm"),
                ("simviable", "metaoptnet_svm"),
            )
        ],
        sparse=True,
    ),
    "sine_step_by_context": _sine(
        ["maml", "metasgd_maml", "cavia", "metasgd_cavia", "relviable_tanh"],
        [(f"C{c}_K10_seed0", f"C = {c}") for c in range(1, 6)],
        PAPER_C5,
    ),
    "sine_step_by_support": _sine(
        ["maml_plain", "metasgd_maml", "cavia", "metasgd_cavia", "relviable_tanh"],
        [(f"vark_K{k}_seed0", f"K = {k}") for k in (0, 1, 2, 3, 4, 20)],
        [("the paper", "paper_sine", "vark")],
    ),
    "sine_step": Table(
        SP,
        [(f"C5_K10_seed{s}", f"seed {s}") for s in (0, 1, 2)],
        ["cavia", "metasgd_cavia", "maml", "metasgd_maml", "relviable_tanh", "metasgd_relviable"],
        corner=RERUNS,
        best="min",
    ),
    "sine_step_paired": Paired(
        [
            (SP, f"C5_K10_seed{s}", a, b)
            for s in (0, 1, 2)
            for a, b in (
                ("metasgd_cavia", "cavia"),
                ("relviable_tanh", "metasgd_cavia"),
                ("metasgd_relviable", "relviable_tanh"),
                ("metasgd_maml", "maml"),
            )
        ],
    ),
    "sine_candidates": Table(
        SP,
        [(f"C5_K10_seed{s}", f"seed {s}") for s in (0, 1, 2)],
        [f"relviable_{act}{c}" for act in ("tanh", "relu") for c in CANDIDATES],
        corner=RERUNS,
        best="min",
    ),
    "sine_candidates_paired": Paired(
        [
            (SP, f"C5_K10_seed{s}", f"relviable_{act}{c}", f"relviable_{act}")
            for act in ("tanh", "relu")
            for c in list(CANDIDATES)[1:]
            for s in (0, 1, 2)
        ],
    ),
    "paper_classification": Table(
        "paper_miniimagenet",
        [("5way1shot", "5-way 1-shot"), ("5way5shot", "5-way 5-shot")],
        ["matching", "maml", "metasgd_maml", "leo", "metaoptnet_svm", "relviable_tanh64"],
        corner="the paper's table (Mini-ImageNet, LEO's features for Meta-SGD and LEO)",
    ),
    "sine_outliers": Table(
        "sine_outliers",
        [
            ("m2_K10_steps1", "one inner step (the paper's)"),
            ("m2_K10_steps1_oracle", "its oracle"),
            ("m2_K10_steps3", "three inner steps"),
            ("m2_K10_steps3_tested_clean", "three steps, tested clean"),
        ],
        [
            "cavia",
            "cavia_huber",
            "relviable",
            "attviable",
            "relviable_agreement",
            "attviable_agreement",
        ],
        corner="trained and tested with 2 outliers of 10",
        best="min",
    ),
    # MeTAL beside VIABLE (docs/metal.md): sine at the paper's protocol and MeTAL's.
    "metal_sine": Table(
        SP,
        [(f"C5_K10_seed{s}", f"seed {s}") for s in (0, 1, 2)],
        ["cavia", "simviable_tanh", "relviable_tanh", "metal_cavia"],
        corner="one inner step (the paper's protocol)",
        best="min",
    ),
    "metal_sine_5steps": Table(
        SP,
        [(f"C5_K10_S5_seed{s}", f"seed {s}") for s in (0, 1, 2)],
        ["cavia", "simviable_tanh", "relviable_tanh", "metal_cavia"],
        corner="five inner steps (MeTAL's protocol)",
        best="min",
    ),
    "metal_sine_paired": Paired(
        [
            (SP, f"C5_K10{steps}_seed{s}", a, b)
            for steps in ("", "_S5")
            for a, b in (
                ("metal_cavia", "relviable_tanh"),
                ("metal_cavia", "simviable_tanh"),
                ("metal_cavia", "cavia"),
            )
            for s in (0, 1, 2)
        ],
        sparse=True,
    ),
    "metal_sine_by_support": Table(
        SP,
        [(f"vark_K{k}_seed0", f"K = {k}") for k in (1, 2, 4, 20)],
        ["cavia", "relviable_tanh", "metal_cavia"],
        corner="trained with K drawn from 0..20 (seed 0)",
        best="min",
    ),
    "metal_beyond_sine": Table(
        SP,
        [(f"C5_K10_seed{s}", f"seed {s}") for s in (0, 1, 2)],
        [
            "relviable_tanh",
            "relviable_adaptive",
            "relviable_query",
            "relviable_adaptive_query",
            "metal_static_cavia",
            "metal_cavia",
            "relmetal_static_cavia",
            "relmetal_cavia",
        ],
        corner="one inner step",
        best="min",
    ),
    "metal_beyond_paired": Paired(
        [
            (SP, f"C5_K10_seed{s}", a, b)
            for a, b in (
                ("relviable_adaptive_query", "relviable_tanh"),
                ("relviable_adaptive", "relviable_tanh"),
                ("relviable_query", "relviable_tanh"),
                ("metal_cavia", "metal_static_cavia"),
                ("relmetal_cavia", "metal_cavia"),
            )
            for s in (0, 1, 2)
        ],
        sparse=True,
    ),
    # MeTAL end to end on the images (docs/metal.md), beside VIABLE and the bases.
    "metal_images": Table(
        E2E,
        WAYS,
        [
            "metal_maml",
            "metal_cavia",
            "relmetal_cavia",
            "maml_simviable",
            "simviable",
            "maml",
            "cavia",
            "protonet",
        ],
        best="max",  # a MeTAL row joins as its first record lands (a table has no empty row)
    ),
    "metal_images_paired": Paired(
        [
            (E2E, setting, ours, base)
            for setting, _ in WAYS
            for ours, bases in (
                ("metal_maml", ("maml_simviable", "maml", "protonet")),
                ("metal_cavia", ("simviable", "cavia", "protonet")),
                ("relmetal_cavia", ("metal_cavia", "cavia")),
            )
            for base in bases
        ],
        sparse=True,
    ),
    # bfloat16 against float32 (gin/precision/bfloat16.gin), on the same test episodes.
    "bfloat16_images_paired": Paired(
        [(E2E, "5way1shot", f"{m}_bfloat16", m) for m in ("protonet", "cavia", "maml_simviable")],
        sparse=True,
    ),
}
