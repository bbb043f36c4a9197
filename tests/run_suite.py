"""The whole suite as CI runs it (the README's test command ends with this script):

    .venv/bin/python tests/run_suite.py [PYTEST_ARGS ...]

every test on both cores (`pytest -n 2 --dist loadfile --no-loadscope-reorder`: whole
files, in the order tests/conftest.py gives them, longest first; its 25 slowest tests
listed) and, at the same time at a lower priority, the `float_sensitive` tests again on
the other float paths, one pytest per path: Eigen's kernels, and the CPU as one without
AVX-512 where this CPU has more (docs/TESTING.md). The float-path runs take the cores the
first leaves idle (between files, at its tail) instead of starting after it. Each
float path imports only the test files that name the marker (VIABLE_TESTS_NAMING, read
by tests/conftest.py, which refuses a float_sensitive test in a file that does not). Bazel's
check of BUILD (tests/bazel_check.sh) runs beside them in the same way: before the
tests it held every one back by its wall-clock (the npm installation, the JVM's start,
the analysis, three tests); beside them the README's test command took 7 and 14 s less
from fresh clones (docs/TESTING.md). The reports of the runs beside follow the first's;
the exit status is non-zero if any run failed. Extra arguments go to every pytest run.

A float path is what it changes for TensorFlow's kernels and for XLA's: without AVX-512,
oneDNN's kernels (`ONEDNN_MAX_CPU_ISA=AVX2`) and XLA's generated code
(`--xla_cpu_max_isa=AVX2`) both stop at AVX2; Eigen's kernels in place of oneDNN's
(`TF_ENABLE_ONEDNN_OPTS=0`) change no XLA program, so the tests marked `xla_only`, whose
arithmetic is all in XLA, compute the main run's bits there and are left out of that path.

The runs keep XLA's compiled programs in a persistent cache for their duration
(`--tf_xla_persistent_cache_directory`, inherited by every process they start): the same
meta-update compiled again, by another test or a command-line run a test starts, is read
back instead of compiled anew. A program is cached under a fingerprint of its HLO and
compile options, which does not include the CPU's ISA limit (`--xla_cpu_max_isa`: an AVX2
run reads an AVX-512 program from the main run's cache), so the AVX2 path has a cache of
its own. The Eigen path shares the main run's: its XLA programs are the main run's (above),
and it mostly reaches a test after the main run compiled it. The caches are deleted at the
end.

The browser's installation, which the README's test command starts in the background
(tests/browser_install.py), is waited for before this script returns; if it failed, so
does the run.
"""

import contextlib
import os
import subprocess
import sys
import tempfile

import browser_install

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


def path_environment(path: str, environ: dict) -> dict:
    """The variables a float path sets: its own, and for the AVX2 path XLA's code limited to
    AVX2 as well (XLA_FLAGS), as on a CPU without AVX-512."""
    name, value = path.split("=", 1)
    variables = {name: value}
    if name == "ONEDNN_MAX_CPU_ISA":
        flags = environ.get("XLA_FLAGS", "")
        variables["XLA_FLAGS"] = f"{flags} --xla_cpu_max_isa={value}".strip()
    return variables


def changes_xla(path: str) -> bool:
    """Whether a float path changes XLA's programs (the AVX2 path limits its code to AVX2)
    or only TensorFlow's kernels (Eigen's path: XLA computes the main run's bits there)."""
    return "XLA_FLAGS" in path_environment(path, {})


def path_markers(path: str) -> str:
    """Which tests a float path reruns: every float_sensitive one, but where XLA's programs
    stay the main run's, not those whose arithmetic XLA alone computes."""
    return "float_sensitive" if changes_xla(path) else "float_sensitive and not xla_only"


def xla_cache(folder: str, environ: dict) -> str:
    """TF_XLA_FLAGS with XLA's persistent compilation cache in `folder`, beside any
    flags already set."""
    flags = environ.get("TF_XLA_FLAGS", "")
    return f"{flags} --tf_xla_persistent_cache_directory={folder}".strip()


#: The variable tests/conftest.py reads: a run with it collects only the test files that
#: name its value (the float paths import about 10 of the suite's 70 files).
COLLECT_NAMING = "VIABLE_TESTS_NAMING"

#: Bazel on the checkout (builds every target of BUILD, runs three tests under it).
BAZEL_CHECK = ("bash", os.path.join(os.path.dirname(os.path.abspath(__file__)), "bazel_check.sh"))


def beside_runs(
    paths: tuple[str, ...], folders: list[str], extra: list[str], pytest: str, environ: dict
) -> list[tuple[str, list[str], dict]]:
    """(title, command, environment) of each run beside the main one, at a lower priority:
    Bazel's check, then the float_sensitive tests on each float path (each with its own
    XLA cache in `folders`). `extra` arguments go to the pytest runs only."""
    runs = [("Bazel's check of BUILD (tests/bazel_check.sh)", list(BAZEL_CHECK), dict(environ))]
    for path, folder in zip(paths, folders, strict=True):
        env = {
            **environ,
            **path_environment(path, environ),
            "TF_XLA_FLAGS": xla_cache(folder, environ),
            COLLECT_NAMING: "float_sensitive",  # tests/conftest.py: only files naming it
        }
        command = [pytest, "-q", "-m", path_markers(path), *extra]
        runs.append((f"The float_sensitive tests on {path}", command, env))
    return [(title, ["nice", "-n", "10", *command], env) for title, command, env in runs]


def cache_folders(paths: tuple[str, ...], root: str) -> list[str]:
    """XLA cache folders under `root`: the main run's, then each float path's. A path that
    leaves XLA's programs as they are (Eigen's) shares the main run's; the AVX2 path's is
    its own."""
    main = os.path.join(root, "main")
    return [main] + [
        os.path.join(root, str(i)) if changes_xla(path) else main for i, path in enumerate(paths)
    ]


def main() -> int:
    pytest = os.path.join(os.path.dirname(sys.executable), "pytest")
    extra = sys.argv[1:]
    caches = tempfile.TemporaryDirectory(prefix="viable-xla-cache-")
    paths = float_paths(hardware.cpu_flags())
    folders = cache_folders(paths, caches.name)
    main_env = {**os.environ, "TF_XLA_FLAGS": xla_cache(folders[0], os.environ)}
    with caches, contextlib.ExitStack() as stack:
        beside = []
        for title, command, env in beside_runs(paths, folders[1:], extra, pytest, os.environ):
            log = stack.enter_context(tempfile.TemporaryFile("w+"))
            run = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
            beside.append((title, log, run))
        try:
            # Files in conftest's LONGEST_FIRST order, not xdist's by test count.
            order = ("--dist", "loadfile", "--no-loadscope-reorder")
            main_run = [pytest, "-q", "-n", "2", *order, "--durations=25"]
            statuses = [subprocess.call([*main_run, *extra], env=main_env)]
            statuses += [run.wait() for _, _, run in beside]
        finally:
            for _, _, run in beside:
                if run.poll() is None:
                    run.kill()
        for title, log, _ in beside:
            log.seek(0)
            print(f"\n{title}:", flush=True)
            sys.stdout.write(log.read())
    reason = browser_install.wait()
    if reason is not None:
        print(f"\n{reason}", flush=True)
        statuses.append(1)
    return next((status for status in statuses if status), 0)


if __name__ == "__main__":
    sys.exit(main())
