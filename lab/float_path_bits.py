"""Which float paths change the bits of an XLA-compiled meta-update: a fingerprint of 100
updates of each learner's overfitting run (tests/test_learners.py) on each path.

    .venv/bin/python lab/float_path_bits.py [--learners=cavia,maml,...] [--steps=100]

A research tool (docs/lab/testing_record.md). Each learner and path runs in a process of
its own, since the variables are read when TensorFlow starts: the main path, Eigen's
kernels (`TF_ENABLE_ONEDNN_OPTS=0`), oneDNN at AVX2 (`ONEDNN_MAX_CPU_ISA=AVX2`), XLA's code
at AVX2 (`--xla_cpu_max_isa=AVX2`) and both. Prints a Markdown table of the first 12 hex
digits of an MD5 of the losses, so equal cells are equal bits; tests/run_suite.py leaves a
test out of a path only where its computation's cells there equal the main path's.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATHS = {
    "main": {},
    "TF_ENABLE_ONEDNN_OPTS=0": {"TF_ENABLE_ONEDNN_OPTS": "0"},
    "ONEDNN_MAX_CPU_ISA=AVX2": {"ONEDNN_MAX_CPU_ISA": "AVX2"},
    "--xla_cpu_max_isa=AVX2": {"XLA_FLAGS": "--xla_cpu_max_isa=AVX2"},
    "both at AVX2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "XLA_FLAGS": "--xla_cpu_max_isa=AVX2"},
}
LEARNERS = "cavia,maml,simviable,relviable,attviable,maml_simviable,maml_relviable"


def fingerprint(learner: str, steps: int) -> str:
    """In this process: the losses of `steps` updates of the overfitting run, hashed."""
    import tempfile

    sys.path.insert(0, os.path.join(REPO, "tests"))
    import test_learners

    with tempfile.TemporaryDirectory() as model_dir:
        losses = test_learners.overfit_losses(test_learners.LEARNERS[learner], model_dir, steps)
    return hashlib.md5(losses.tobytes()).hexdigest()[:12]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--learners", default=LEARNERS)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # LEARNER: this process's part
    args = parser.parse_args()
    if args.one:
        print(fingerprint(args.one, args.steps))
        return
    print("| learner | " + " | ".join(PATHS) + " |")
    print("|---|" + "---|" * len(PATHS))
    for learner in args.learners.split(","):
        cells = []
        for variables in PATHS.values():
            env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **variables}
            command = [sys.executable, __file__, f"--one={learner}", f"--steps={args.steps}"]
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
            cells.append(f"`{done.stdout.split()[-1]}`")
        print(f"| {learner} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
