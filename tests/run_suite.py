"""The whole suite as CI runs it (the README's test command ends with this script):

    .venv/bin/python tests/run_suite.py [PYTEST_ARGS ...]

every test on both cores (`pytest -n 2 --dist loadfile --no-loadscope-reorder`: whole
files, in the order tests/conftest.py gives them, longest first; its 25 slowest tests
listed) and, at the same time at a lower priority, the `float_sensitive` tests again on
the other float paths: Eigen's kernels, and oneDNN as on a CPU without AVX-512 where this
CPU has more (docs/TESTING.md). The second run takes the cores the first leaves idle
(between files, at its tail) instead of starting after it. Its report follows the
first's; the exit status is non-zero if either run failed. Extra arguments go to both runs.

Each run keeps XLA's compiled programs in a persistent cache of its own for its
duration (`--tf_xla_persistent_cache_directory`, inherited by every process it starts):
the same meta-update compiled again, by another test or a command-line run a test
starts, is read back instead of compiled anew. A program is cached under a fingerprint
of its HLO and options, so what runs is what a fresh compile would give; each float path
has its own cache, and the caches are deleted at the end.
"""

import os
import subprocess
import sys
import tempfile

from viable_tf import hardware  # no TensorFlow: /proc/cpuinfo's flags

FLOAT_PATHS = ("TF_ENABLE_ONEDNN_OPTS=0", "ONEDNN_MAX_CPU_ISA=AVX2")

#: CPU flags (Linux's /proc/cpuinfo names) that give oneDNN kernels above AVX2 for float32.
ABOVE_AVX2 = ("avx512f", "avx_vnni", "avx_ne_convert", "amx_tile")


def float_paths(flags: frozenset[str]) -> tuple[str, ...]:
    """The float paths to run the float_sensitive tests on beside the main run. On a CPU
    whose best oneDNN kernels are AVX2's, `ONEDNN_MAX_CPU_ISA=AVX2` is the path the main
    run already takes, so it is left out (where the flags cannot be read, it stays)."""
    if flags and not flags & set(ABOVE_AVX2):
        return tuple(path for path in FLOAT_PATHS if not path.startswith("ONEDNN_MAX_CPU_ISA"))
    return FLOAT_PATHS


def xla_cache(folder: str) -> str:
    """TF_XLA_FLAGS with XLA's persistent compilation cache in `folder`, beside any
    flags already set."""
    flags = os.environ.get("TF_XLA_FLAGS", "")
    return f"{flags} --tf_xla_persistent_cache_directory={folder}".strip()


def main() -> int:
    pytest = os.path.join(os.path.dirname(sys.executable), "pytest")
    extra = sys.argv[1:]
    caches = tempfile.TemporaryDirectory(prefix="viable-xla-cache-")
    paths = float_paths(hardware.cpu_flags())
    folders = [os.path.join(caches.name, str(i)) for i in range(len(paths) + 1)]
    beside_run = [
        *("nice", "-n", "10", pytest, "-q", "-m", "float_sensitive", "--dist", "each"),
        *(
            f"--tx=popen//env:{path}//env:TF_XLA_FLAGS={xla_cache(folder)}"
            for path, folder in zip(paths, folders[1:], strict=True)
        ),
        *extra,
    ]
    main_env = {**os.environ, "TF_XLA_FLAGS": xla_cache(folders[0])}
    with caches, tempfile.TemporaryFile("w+") as log:
        beside = subprocess.Popen(beside_run, stdout=log, stderr=subprocess.STDOUT)
        try:
            # Files in conftest's LONGEST_FIRST order, not xdist's by test count.
            order = ("--dist", "loadfile", "--no-loadscope-reorder")
            main_run = [pytest, "-q", "-n", "2", *order, "--durations=25"]
            status = subprocess.call([*main_run, *extra], env=main_env)
            float_status = beside.wait()
        finally:
            if beside.poll() is None:
                beside.kill()
        log.seek(0)
        print(f"\nThe float_sensitive tests on {' and '.join(paths)}:", flush=True)
        sys.stdout.write(log.read())
    return status or float_status


if __name__ == "__main__":
    sys.exit(main())
