"""The methods' names in the Omniglot drivers' reports and tables, by run name."""

LABELS = {  # every method with configs in gin/omniglot/; METHODS run by default
    "cavia": "CAVIA",
    "simviable": "simVIABLE",
    "relviable": "relVIABLE",
    "maml": "MAML",
    "attviable": "attVIABLE",
    "maml_simviable": "MAML+simVIABLE",
    "maml_relviable": "MAML+relVIABLE",
}
# The same methods with the prototype head: gin/omniglot/<method>_proto_*.gin.
PLAIN = dict(LABELS)
LABELS.update({f"{method}_proto": f"{label}, prototype head" for method, label in PLAIN.items()})
# ... and with the cosine prototype head: gin/omniglot/<method>_cosine_*.gin.
LABELS.update({f"{method}_cosine": f"{label}, cosine head" for method, label in PLAIN.items()})
# LEO and VIABLE on LEO: gin/omniglot/leo*_*.gin; LEO's own head, no '_proto'.
LABELS.update({"leo": "LEO", "leo_simviable": "LEO+simVIABLE", "leo_relviable": "LEO+relVIABLE"})
# End to end (gin/omniglot_conv/): the conv net's prototype head with no inner steps.
LABELS["protonet"] = "Prototypical Network"
LABELS["relviable_leaky"] = "relVIABLE, leaky-ReLU pairs"
LABELS.update({f"{m}_stepped": f"{LABELS[m]}, stepped head" for m in PLAIN})
# The paper's comparators (gin/omniglot_conv/): docs/method.md §10.
LABELS.update(
    {
        "metasgd_cavia": "Meta-SGD on CAVIA",
        "metasgd_maml": "Meta-SGD on MAML",
        "metasgd_simviable": "simVIABLE at Meta-SGD's step",
        "matching": "Matching Networks",
        "matching_fce": "Matching Networks, full-context embeddings",
        "r2d2": "R2-D2 (ridge-regression head)",
        "metaoptnet_svm": "MetaOptNet-SVM",
        "matching_tau": "Matching Networks, cosine / 0.1",
        "matching_fce_tau": "Matching Networks, full-context embeddings, cosine / 0.1",
        "metaoptnet_svm_normalized": "MetaOptNet-SVM, l2-normalised features",
    }
)
# The variants beyond the paper that the results pages show (gin/omniglot_conv/).
LABELS.update(
    {
        "relviable_tanh64": "relVIABLE, 2 x 64 tanh pairs",
        "relviable_tanh64_residual": "relVIABLE, 2 x 64 tanh pairs, residual",
        "simviable_residual": "simVIABLE, residual",
        # MeTAL, the task-adaptive learned loss (docs/method.md §11)
        "metal_maml": "MeTAL on MAML",
        "metal_cavia": "MeTAL on CAVIA",
        "relmetal_cavia": "MeTAL on CAVIA, terms over pairs",
        "metal_maml_steps5": "MeTAL on MAML, 5 steps",
    }
)
