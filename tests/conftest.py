"""Shared fixtures. TensorFlow logs only errors during tests.

TensorFlow and Keras are imported where they are used, not at the top: xdist's controller
process loads this file for its hooks and runs no test, and a TensorFlow import there
(about 5 CPU s) delayed the workers' own at the suite's start."""

import functools
import importlib.util
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import gin
import pytest
from run_suite import COLLECT_NAMING  # no TensorFlow: the suite's runner


def checkpoint_values(path: str) -> dict:
    """Every saved tensor of a checkpoint, by name (the object graph left out)."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(path)
    return {
        name: reader.get_tensor(name)
        for name in reader.get_variable_to_shape_map()
        if name != "_CHECKPOINTABLE_OBJECT_GRAPH"
    }


@pytest.fixture(autouse=True)
def _fresh_state():
    """Every test starts with no gin bindings and a fixed Keras seed."""
    gin.clear_config()
    import keras

    keras.utils.set_random_seed(0)
    yield
    gin.clear_config()


@pytest.fixture(scope="module")
def client(server):
    """A gRPC client of the module's `server` fixture (a serving_harness.RunningServer)."""
    from serving.client import Client

    client = Client(server.grpc_target)
    yield client
    client.close()


@pytest.fixture
def run_cli(monkeypatch, capsys):
    """Runs a command-line module's main() in this process (no TensorFlow to import
    again): returns its exit status and what it printed."""

    def run(module, argv):
        monkeypatch.setattr(sys, "argv", [module.__name__, *argv])
        with pytest.raises(SystemExit) as exit_info:
            module.main()
        return exit_info.value.code, capsys.readouterr()

    return run


def unreached_by_design(learner) -> set[int]:
    """ids of the weights no meta-gradient reaches: a ReLU loss network's biases
    (docs/method.md §3.1: d Lhat / d phi depends on them only through which units are on, and
    ops.relu's gradient is a select on that). tape.gradient gives them None."""
    from viable_tf.networks import RelationLossNetwork, SimpleLossNetwork

    loss_network = getattr(learner, "loss_network", None)
    if not isinstance(loss_network, (SimpleLossNetwork, RelationLossNetwork)):
        return set()
    if loss_network.activation.__name__ != "relu":
        return set()
    return {id(v) for v in loss_network.trainable_variables if "bias" in v.path}


def load_tool(name: str):
    """lab/<name>.py as a module, loaded from its file as the script it also is."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location(name, os.path.join(repo, "lab", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: The files that take longest (each test's time from `--junitxml`, summed by file, on
#: the Intel Xeon of docs/TESTING.md), longest first, down to about 15 s of 2 cores.
#: `--dist loadfile` hands out whole files in collection order (tests/run_suite.py turns
#: off xdist's own reordering by test count, which put the one-test files that take a
#: minute last), so these go first and the short files fill in at the end, instead of
#: one long file running alone on one core while the other waits.
LONGEST_FIRST = (
    "test_trainer.py",
    "test_classification.py",
    "test_omniglot.py",
    "test_user_models.py",
    "test_leo.py",
    "test_distributed.py",
    "test_serving.py",
    "test_distributed_resume.py",
    "test_comparators.py",
    "test_learners.py",
    "test_record_commands.py",
    "test_contract.py",
    "test_image_folder.py",
    "test_cli.py",
    "test_image_export.py",
    "test_sine_paper.py",
    "test_packaging.py",
    "test_notebooks.py",
    "test_demo_page.py",
    "test_inner_loop_jumps.py",
    "test_notebook_images.py",
    "test_distributed_trajectory.py",
    "test_notebook_omniglot.py",
    "test_gin_configs.py",
    "test_promises.py",
)


#: Fixtures that train or start a process (a training run, a TensorFlow in a subprocess): a
#: test that takes one is `slow` whatever its own body does, so that the fast tier
#: (`-m "not slow"`, docs/TESTING.md) never waits for them.
SLOW_FIXTURES = frozenset({"trained_run", "trained", "mirrored_checks"})


def pytest_ignore_collect(collection_path, config):
    """With COLLECT_NAMING set (tests/run_suite.py sets it for a float path's run, to the
    marker it reruns), a test file whose text never names that marker holds no test of it
    and is not imported: importing the whole suite to deselect all but a few files was most
    of such a run's start."""
    marker = os.environ.get(COLLECT_NAMING)
    if marker and collection_path.name.startswith("test_") and collection_path.suffix == ".py":
        return not _names(collection_path, marker) or None
    return None  # no opinion: pytest's own rules


@functools.cache
def _names(path, marker: str) -> bool:
    return marker in path.read_text()


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items):
    # `xla_only` narrows a float path's rerun (tests/run_suite.py): on a test that no float
    # path reruns it would say something untrue, so it is refused at collection.
    for item in items:
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("xla_only") and not item.get_closest_marker("float_sensitive"):
            raise pytest.UsageError(f"{item.nodeid} is marked xla_only but not float_sensitive")
        # The float paths collect only the files that name the marker (COLLECT_NAMING): one
        # that gets it otherwise (from a helper module, say) would drop out of them silently.
        if item.get_closest_marker("float_sensitive") and not _names(item.path, "float_sensitive"):
            raise pytest.UsageError(
                f"{item.nodeid} is marked float_sensitive but its file never names the "
                "marker, so the float paths would not collect it"
            )
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: files stay whole
