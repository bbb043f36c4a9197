"""rules_python's `requirement`, offline: the .venv holds every pinned requirement, and
each is an empty library of this repository (bazel/pypi/BUILD)."""

def requirement(name):
    return "@pypi//:" + name.replace("-", "_").lower()
