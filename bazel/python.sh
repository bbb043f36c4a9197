#!/bin/sh
# The Python that Bazel's py_test runs: the checkout's .venv (the README's setup installs
# every dependency there). This script is reached through a runfiles symlink; its real
# path is in the checkout.
here=$(dirname "$(readlink -f "$0")")
exec "$here/../.venv/bin/python" "$@"
