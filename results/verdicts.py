"""The verdict table of docs/RESULTS.md: one line per question, its answer, and the records
that give it (rendered by results/render.py, never typed)."""

from __future__ import annotations

import re

from results.render import Verdicts

S, IMG, FRZ, LEO = "sine", "omniglot_images", "omniglot_features", "omniglot_features_leo"
SEED0 = "C5_K10_seed0"

VERDICTS = Verdicts(
    [
        (
            "Sine: is relVIABLE far better than CAVIA (the paper: 0.01 against 0.19)?",
            "helps",
            [
                (S, SEED0, "relviable_tanh"),
                (S, SEED0, "cavia"),
                ("paper_sine", "C5_K10", "relviable_tanh"),
            ],
            "[sine](#sine-regression)",
        ),
        (
            "Sine: does simVIABLE sit between CAVIA and relVIABLE?",
            "yes",
            [(S, SEED0, "simviable_tanh"), (S, SEED0, "simviable_relu")],
            "[sine](#sine-regression)",
        ),
        (
            "Sine: does relVIABLE with 4 points beat CAVIA with 20?",
            "no",
            [(S, "vark_K4_seed0", "relviable_tanh"), (S, "vark_K20_seed0", "cavia")],
            "[sine](#sine-regression)",
        ),
        (
            "Learn the inner loop's step (Meta-SGD) or its loss (VIABLE), on sine and on images?",
            "the loss on sine and at 5-way 1-shot, where the step adds nothing measurable to"
            " CAVIA; on MAML both help, the loss more at 1 and 5 shots and 20 ways. On CAVIA at"
            " 5 shots the two are level and worse combined; at 20 ways the step adds 3 points"
            " and the paper's loss stays at chance",
            [
                ("paired", "sine_paired", SEED0, "metasgd_cavia", "cavia"),
                ("paired", "sine_paired", SEED0, "relviable_tanh", "metasgd_cavia"),
                (IMG, "5way1shot", "simviable"),
                (IMG, "5way1shot", "metasgd_cavia"),
                (IMG, "5way1shot", "cavia"),
                ("paired", IMG, "5way1shot", "metasgd_simviable", "metasgd_cavia"),
                ("paired", IMG, "5way1shot", "maml_simviable", "metasgd_maml"),
                ("paired", IMG, "5way5shot", "maml_simviable", "metasgd_maml"),
                ("paired", IMG, "20way1shot", "maml_simviable", "metasgd_maml"),
                ("paired", IMG, "5way5shot", "simviable", "metasgd_cavia"),
                ("paired", IMG, "5way5shot", "metasgd_simviable", "simviable"),
                ("paired", IMG, "20way1shot", "metasgd_cavia", "cavia"),
            ],
            "[sine](comparisons.md#meta-sgd-against-viable-on-sine), [images]"
            "(comparisons.md#the-papers-comparators-on-omniglot-images-paired)",
        ),
        (
            "Frozen Omniglot features, the paper's output layer: does the learned loss help CAVIA?",
            "helps",
            [(FRZ, "5way1shot", "simviable"), (FRZ, "5way1shot", "cavia")],
            "[frozen features](#omniglot-on-frozen-features)",
        ),
        (
            "Frozen features, output layer at the class means (prototype or cosine head)?",
            "no gain",
            [
                (FRZ, "5way1shot", "simviable_proto"),
                (FRZ, "5way1shot", "cavia_proto"),
                (FRZ, "5way1shot", "nearest_class_mean"),
            ],
            "[frozen features](#omniglot-on-frozen-features)",
        ),
        (
            "VIABLE on LEO (the learned loss in LEO's latent steps)?",
            "no gain",
            [(LEO, "5way1shot", "leo_relviable"), (LEO, "5way1shot", "leo")],
            "[LEO](#leo-and-viable-on-leo)",
        ),
        (
            "Images end to end, 5-way 1-shot: does simVIABLE beat CAVIA?",
            "helps",
            [(IMG, "5way1shot", "simviable"), (IMG, "5way1shot", "cavia")],
            "[images](#omniglot-images-end-to-end)",
        ),
        (
            "Images end to end, 5-way 5-shot: simVIABLE, relVIABLE against CAVIA?",
            "simVIABLE helps a little; relVIABLE worse",
            [
                ("paired", IMG, "5way5shot", "simviable", "cavia"),
                ("paired", IMG, "5way5shot", "relviable_tanh64", "cavia"),
            ],
            "[images](#omniglot-images-end-to-end)",
        ),
        (
            "Images end to end, 20-way 1-shot, the paper's form of the learned loss?",
            "worse: chance",
            [(IMG, "20way1shot", "simviable"), (IMG, "20way1shot", "cavia")],
            "[images](#omniglot-images-end-to-end)",
        ),
        (
            "20-way 1-shot with the learned loss added to the task loss (beyond the paper)?",
            "helps",
            [("paired", IMG, "20way1shot", "relviable_tanh64_residual", "cavia")],
            "[images](#omniglot-images-end-to-end)",
        ),
        (
            "VIABLE on MAML (beyond the paper), 5-way 1-shot and 5-shot, 20-way 1-shot?",
            "helps",
            [
                ("paired", IMG, "5way1shot", "maml_simviable", "maml"),
                ("paired", IMG, "5way5shot", "maml_simviable", "maml"),
                ("paired", IMG, "20way1shot", "maml_simviable", "maml"),
            ],
            "[images](#omniglot-images-end-to-end)",
        ),
        (
            "Is the best VIABLE at least as good as a Prototypical Network on the same net?",
            "no",
            [
                (IMG, "5way1shot", "simviable_proto"),
                (IMG, "5way1shot", "protonet"),
                ("paired", IMG, "5way5shot", "simviable_proto", "protonet"),
            ],
            "[images](#omniglot-images-end-to-end)",
        ),
        (
            "Against the state of the art the paper names (MetaOptNet-SVM), on the same net?",
            "VIABLE on MAML ahead at 1 and 5 shots and 20 ways; the SVM stays 6-9 points under"
            " the ridge head at 5 ways and 41 at 20, trained through a solve far from its optimum",
            [
                ("paired", IMG, "5way1shot", "maml_simviable", "metaoptnet_svm"),
                ("paired", IMG, "5way5shot", "maml_simviable", "metaoptnet_svm"),
                ("paired", IMG, "20way1shot", "maml_simviable", "metaoptnet_svm"),
                ("paired", IMG, "5way1shot", "metaoptnet_svm", "r2d2"),
                ("paired", IMG, "5way5shot", "metaoptnet_svm", "r2d2"),
                ("paired", IMG, "20way1shot", "metaoptnet_svm", "r2d2"),
            ],
            "[comparators](comparisons.md#the-papers-comparators-on-omniglot-images-paired)",
        ),
        (
            "Sine with 2 outliers of 10: does a learned loss beat a robust hand-made one?",
            "helps",
            [
                ("sine_outliers", "m2_K10_steps1", "attviable_agreement"),
                ("sine_outliers", "m2_K10_steps1", "cavia_huber"),
            ],
            "[corrupted support sets](#corrupted-support-sets)",
        ),
        (
            "Mini-ImageNet (the paper's classification benchmark)?",
            "not measured here",
            [],
            "[why](#what-is-not-measured)",
        ),
    ]
)


def _from_repo_root(link: str) -> str:
    """A link written for docs/RESULTS.md, rebased for a page at the repository's root: an
    anchor of RESULTS.md itself, or any other page of docs/ named relative to it."""
    return re.sub(r"\]\((#|(?![a-z]+:)[^)#]*)", _rebase, link)


def _rebase(match: re.Match) -> str:
    target = match.group(1)
    return "](docs/" + ("RESULTS.md#" if target == "#" else target)


#: The README's lines: the same answers, linking into docs/.
GLANCE = Verdicts(
    [
        (claim, verdict, figures, _from_repo_root(link))
        for claim, verdict, figures, link in (VERDICTS.rows[i] for i in (0, 3, 4, 7, 10, 12))
    ]
)
