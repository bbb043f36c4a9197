"""The suite's own promises: a crashed or hung test fails the run promptly, and the
browser's installation beside it is waited for."""

import os
import subprocess
import sys
import threading
import time

import browser_install
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_a_crashed_worker_and_a_hung_test_fail_the_run_instead_of_hanging(tmp_path):
    """Run with the project's pytest configuration (its addopts and timeout method), as
    the README runs the suite (-n 2 --dist loadfile): a C++ abort in one file and a hang
    in another end the run with failures, within seconds of the stated timeout."""
    (tmp_path / "test_abort.py").write_text(
        "import os\n\ndef test_aborts():\n    os.abort()  # as dnnl::error's terminate()\n"
    )
    (tmp_path / "test_hang.py").write_text(
        "import time\n\ndef test_hangs():\n    time.sleep(3600)\n\n"
        "def test_after_the_hang():\n    pass\n"
    )
    (tmp_path / "test_fine.py").write_text("def test_fine():\n    pass\n")
    start = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            os.path.join(REPO, "pyproject.toml"),
            "--rootdir",
            str(tmp_path),
            "-p",
            "no:cacheprovider",
            "-q",
            "-n",
            "2",
            "--dist",
            "loadfile",
            "--timeout=5",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    elapsed = time.monotonic() - start
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    assert "crashed while running 'test_abort.py::test_aborts'" in output, output[-3000:]
    # pytest-timeout's thread method ends the hung worker (its stacks dumped to stderr).
    assert "crashed while running 'test_hang.py::test_hangs'" in output, output[-3000:]
    assert elapsed < 120, f"the run took {elapsed:.0f} s"


def test_the_avx2_float_path_is_rerun_only_where_the_main_run_takes_another():
    import run_suite

    zen3 = frozenset({"fpu", "sse4_2", "avx", "avx2", "fma"})
    assert run_suite.float_paths(zen3) == ("TF_ENABLE_ONEDNN_OPTS=0",)
    assert run_suite.float_paths(zen3 | {"avx512f", "avx512bw"}) == run_suite.FLOAT_PATHS
    assert run_suite.float_paths(zen3 | {"avx_vnni"}) == run_suite.FLOAT_PATHS
    assert run_suite.float_paths(frozenset()) == run_suite.FLOAT_PATHS  # flags unknown: both


def test_the_avx2_path_limits_xla_too_and_the_eigen_path_leaves_out_what_xla_computes():
    import run_suite

    avx2 = run_suite.path_environment("ONEDNN_MAX_CPU_ISA=AVX2", {"XLA_FLAGS": "--xla_dump_to=d"})
    assert avx2 == {
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "XLA_FLAGS": "--xla_dump_to=d --xla_cpu_max_isa=AVX2",
    }
    eigen = run_suite.path_environment("TF_ENABLE_ONEDNN_OPTS=0", {})
    assert eigen == {"TF_ENABLE_ONEDNN_OPTS": "0"}
    assert run_suite.path_markers("TF_ENABLE_ONEDNN_OPTS=0") == "float_sensitive and not xla_only"
    assert run_suite.path_markers("ONEDNN_MAX_CPU_ISA=AVX2") == "float_sensitive"


def test_the_eigen_path_shares_the_main_runs_xla_cache_and_the_avx2_path_has_its_own():
    """XLA's cache key leaves out the ISA limit: a shared cache would give the AVX2 path the
    main run's AVX-512 programs. Eigen's kernels leave XLA's programs as they are."""
    import run_suite

    folders = run_suite.cache_folders(run_suite.FLOAT_PATHS, "/c")
    assert run_suite.FLOAT_PATHS[0].startswith("TF_ENABLE_ONEDNN_OPTS")
    assert folders[0] == folders[1] and len(set(folders)) == 2
    assert run_suite.cache_folders(("TF_ENABLE_ONEDNN_OPTS=0",), "/c") == ["/c/main"] * 2


def test_the_float_paths_import_only_the_files_that_name_their_marker(tmp_path, monkeypatch):
    import conftest
    import run_suite

    runs = run_suite.beside_runs(run_suite.FLOAT_PATHS, ["a", "b"], [], "pytest", {})
    assert all(env[run_suite.COLLECT_NAMING] == "float_sensitive" for _, _, env in runs[1:])
    assert run_suite.COLLECT_NAMING not in runs[0][2]  # Bazel's check
    named, other = tmp_path / "test_named.py", tmp_path / "test_other.py"
    named.write_text("@pytest.mark.float_sensitive\ndef test_a():\n    pass\n")
    other.write_text("def test_b():\n    pass\n")
    helper = tmp_path / "helper.py"
    helper.write_text("")
    monkeypatch.delenv(run_suite.COLLECT_NAMING, raising=False)
    assert [conftest.pytest_ignore_collect(p, None) for p in (named, other)] == [None, None]
    monkeypatch.setenv(run_suite.COLLECT_NAMING, "float_sensitive")
    ignored = [conftest.pytest_ignore_collect(p, None) for p in (named, other, helper)]
    assert ignored == [None, True, None]


def test_every_file_of_the_longest_first_order_exists():
    """A renamed or removed file would drop out of the order silently, and its tests run
    wherever the collection puts them."""
    import conftest

    here = os.path.join(REPO, "tests")
    assert [f for f in conftest.LONGEST_FIRST if not os.path.isfile(os.path.join(here, f))] == []
    assert len(set(conftest.LONGEST_FIRST)) == len(conftest.LONGEST_FIRST)


def test_every_fixture_that_makes_a_test_slow_exists():
    """A renamed fixture would drop out of `SLOW_FIXTURES` silently and put its tests back
    in the fast tier."""
    import re

    import conftest

    here = os.path.join(REPO, "tests")
    defined = set()
    for name in os.listdir(here):
        if name.endswith(".py"):
            with open(os.path.join(here, name)) as f:
                defined.update(re.findall(r"@pytest\.fixture[^\n]*\ndef (\w+)\(", f.read()))
    assert not conftest.SLOW_FIXTURES - defined, "no such fixture"


def test_the_browser_installation_is_waited_for_and_its_failure_said(tmp_path):
    status = tmp_path / "browser_install"
    assert browser_install.wait(status=str(status)) is None  # none under way
    status.write_text("0\n")
    assert browser_install.wait(status=str(status)) is None
    status.write_text("100\n")
    assert browser_install.wait(status=str(status)) == (
        "the installation of chromium and chromium-driver exited with status 100"
    )
    status.write_text("running\n")
    threading.Timer(0.5, status.write_text, ("0\n",)).start()
    started = time.monotonic()
    assert browser_install.wait(status=str(status)) is None
    assert time.monotonic() - started >= 0.4  # it waited for the status
    status.write_text("running\n")
    assert "still ran after 1 s" in browser_install.wait(timeout=1, status=str(status))
    os.utime(status, (time.time() - 60, time.time() - 60))  # left by a killed command
    assert browser_install.wait(timeout=30, status=str(status)) is None


def test_bazel_runs_beside_the_tests_and_takes_no_pytest_arguments():
    """The README's test command leaves Bazel's check to run_suite.py, beside the tests at
    a lower priority; pytest's extra arguments (`-k`, `-x`) are not Bazel's."""
    import run_suite

    with open(os.path.join(REPO, ".ci", "run")) as f:
        assert "bazel_check" not in f.read()  # not before the tests as well
    runs = run_suite.beside_runs(run_suite.FLOAT_PATHS, ["a", "b"], ["-x"], "pytest", {})
    titles = [title for title, _, _ in runs]
    assert titles[0].startswith("Bazel's check") and len(runs) == 3
    bazel = runs[0][1]
    assert bazel[:3] == ["nice", "-n", "10"] and bazel[-1].endswith("tests/bazel_check.sh")
    assert "-x" not in bazel and os.path.isfile(bazel[-1])
    assert all(command[-1] == "-x" and command[:3] == bazel[:3] for _, command, _ in runs[1:])
    assert [env["TF_XLA_FLAGS"] for _, _, env in runs[1:]] == [
        "--tf_xla_persistent_cache_directory=a",
        "--tf_xla_persistent_cache_directory=b",
    ]
