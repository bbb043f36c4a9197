"""The whole suite as CI runs it (the README's test command ends with this script):

    .venv/bin/python tests/run_suite.py [PYTEST_ARGS ...]

every test on both cores (`pytest -n 2 --dist loadfile`, with its 25 slowest tests
listed) and, at the same time at a
lower priority, the `float_sensitive` tests again on two other float paths (Eigen's
kernels, and oneDNN as on a CPU without AVX-512; docs/TESTING.md). The second run takes
the cores the first leaves idle (between files, at its tail) instead of starting after
it. Its report follows the first's; the exit status is non-zero if either run failed.
Extra arguments go to both runs.
"""

import os
import subprocess
import sys
import tempfile

FLOAT_PATHS = ("TF_ENABLE_ONEDNN_OPTS=0", "ONEDNN_MAX_CPU_ISA=AVX2")


def main() -> int:
    pytest = os.path.join(os.path.dirname(sys.executable), "pytest")
    extra = sys.argv[1:]
    float_paths = [
        *("nice", "-n", "10", pytest, "-q", "-m", "float_sensitive", "--dist", "each"),
        *(f"--tx=popen//env:{path}" for path in FLOAT_PATHS),
        *extra,
    ]
    with tempfile.TemporaryFile("w+") as log:
        beside = subprocess.Popen(float_paths, stdout=log, stderr=subprocess.STDOUT)
        try:
            main_run = [pytest, "-q", "-n", "2", "--dist", "loadfile", "--durations=25"]
            status = subprocess.call([*main_run, *extra])
            float_status = beside.wait()
        finally:
            if beside.poll() is None:
                beside.kill()
        log.seek(0)
        print(f"\nThe float_sensitive tests on {' and '.join(FLOAT_PATHS)}:", flush=True)
        sys.stdout.write(log.read())
    return status or float_status


if __name__ == "__main__":
    sys.exit(main())
