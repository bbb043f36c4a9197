"""rules_python's Python rules, as Bazel 2.1's native ones (an offline stand-in)."""

def py_library(**kwargs):
    native.py_library(**kwargs)

def py_test(**kwargs):
    native.py_test(**kwargs)

def py_binary(**kwargs):
    native.py_binary(**kwargs)

def py_runtime(**kwargs):
    native.py_runtime(**kwargs)
