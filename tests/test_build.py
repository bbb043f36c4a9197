"""BUILD declares a target for every module and test file of the tree."""

import glob
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _targets():
    """Evaluates BUILD (Starlark here is a subset of Python) with recording stubs."""
    targets = []

    def rule(kind):
        def record(**kwargs):
            targets.append((kind, kwargs))

        return record

    namespace = {
        "load": lambda *args: None,
        "package": lambda **kwargs: None,
        "glob": lambda patterns: sorted(
            path for p in patterns for path in glob.glob(os.path.join(REPO, p), recursive=True)
        ),
        "requirement": lambda name: f"@pypi//{name}",
        "py_library": rule("py_library"),
        "py_test": rule("py_test"),
        "filegroup": rule("filegroup"),
    }
    with open(os.path.join(REPO, "BUILD")) as f:
        exec(compile(f.read(), "BUILD", "exec"), namespace)
    return targets


def _normalise(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _sources(targets, kind):
    return {src for k, t in targets if k == kind for src in t["srcs"]}


def test_every_module_is_in_a_library():
    modules = {
        os.path.relpath(p, REPO)
        for package in ("viable_tf", "serving", "lab", "results")
        for p in glob.glob(os.path.join(REPO, package, "**", "*.py"), recursive=True)
    }
    listed = _sources(_targets(), "py_library")
    assert not modules - listed, f"missing from BUILD: {sorted(modules - listed)}"
    stale = {s for s in listed if not s.startswith("tests/")} - modules
    assert not stale, f"stale BUILD entries: {sorted(stale)}"


def test_every_py_test_runs_pytest_main_from_its_own_sources_on_the_repository_files():
    """rules_python and native py_test both refuse a `main` outside `srcs`."""
    tests = [t for k, t in _targets() if k == "py_test"]
    assert tests
    for test in tests:
        assert test["main"] in test["srcs"], test["name"]
        assert ":repository_files" in test.get("data", []), test["name"]


def test_every_test_file_has_a_py_test():
    tests = {os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "tests", "test_*.py"))}
    listed = _sources(_targets(), "py_test") - {"tests/pytest_main.py"}
    assert tests == listed, f"missing: {sorted(tests - listed)}, stale: {sorted(listed - tests)}"


def test_requirements_of_the_library_are_pinned_in_the_lock():
    with open(os.path.join(REPO, "requirements_lock.txt")) as f:
        pinned = {_normalise(line.split("==")[0]) for line in f if "==" in line}
    for _kind, target in _targets():
        for dep in target.get("deps", []):
            if dep.startswith("@pypi//"):
                assert _normalise(dep.removeprefix("@pypi//")) in pinned, (target["name"], dep)


def test_ci_runs_exactly_the_readme_test_command():
    with open(os.path.join(REPO, "README.md")) as f:
        commands = [line.strip() for line in f.read().split("---")[0].splitlines()]
    commands = [line for line in commands if line.startswith("python3.11 -m venv .venv")]
    assert len(commands) == 2, "README must open with the main-job and test commands"
    with open(os.path.join(REPO, ".ci", "run")) as f:
        ci_lines = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    assert ci_lines[-1] == commands[1]
    assert "viable-train" in commands[0] and "tests/run_suite.py" in commands[1]  # pytest


def test_the_readme_stays_a_three_minute_read():
    """A newcomer reads the README in about three minutes at 8 KB; its glance table is
    rendered from the records, so a footnote added there can push it over: detail goes
    to docs/."""
    size = os.path.getsize(os.path.join(REPO, "README.md"))
    assert size <= 8 * 1024, f"README.md is {size} bytes; move detail into docs/"
