"""Probes that answered one research question each, kept runnable from a checkout (not
installed with the package): `python -m research.<probe>` from the repository root.
Each names the question in its docstring and the page its answer lives on."""
