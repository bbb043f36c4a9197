"""The house's shape, checked: no import circles, modules of a readable size,
benchmarks that share one timing module, and the layers' contract (the README's test
command runs `lint-imports` on it; here the same contract, so a failing layer also names
the test)."""

import ast
import glob
import os
import subprocess
import sys

import grimp
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_LINES = 400


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _cycles(graph) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    index, low, on_stack, stack, groups = {}, {}, set(), [], []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in edges[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in sorted(edges):
        if module not in index:
            visit(module)
    return groups


def test_no_import_circles():
    """Lazy imports inside functions count too (grimp reads every import statement)."""
    graph = grimp.build_graph("viable_tf", "serving", "results")
    assert len(graph.modules) > 50
    assert _cycles(graph) == []


def test_the_layers_contract_holds():
    result = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "lint-imports")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert "Contracts: 5 kept, 0 broken." in result.stdout


def test_the_contract_lists_no_exception():
    with open(os.path.join(REPO, "pyproject.toml")) as f:
        text = f.read()
    section = text[text.index("[tool.importlinter]") :]
    assert "ignore_imports" not in section and "exclude_type_checking_imports" not in section


@pytest.mark.parametrize("package", ["viable_tf", "serving", "results", "benchmarks", "lab"])
def test_no_module_over_400_lines(package):
    sizes = {
        os.path.relpath(path, REPO): _read(path).count("\n")
        for path in glob.glob(os.path.join(REPO, package, "**", "*.py"), recursive=True)
    }
    assert sizes
    assert {path: n for path, n in sizes.items() if n > MAX_LINES} == {}


def _learner_calls(name_of) -> list[str]:
    """'path:line name' of every call in viable_tf/learners/ that `name_of(call)` names
    (a string), skipping those it gives None."""
    found = []
    for path in sorted(glob.glob(os.path.join(REPO, "viable_tf", "learners", "*.py"))):
        for node in ast.walk(ast.parse(_read(path))):
            if isinstance(node, ast.Call) and (name := name_of(node)):
                found.append(f"{os.path.relpath(path, REPO)}:{node.lineno} {name}")
    return found


def _learner_nodes(name_of) -> list[str]:
    """'path:line name' of every node in viable_tf/learners/ that `name_of(node)` names."""
    found = []
    for path in sorted(glob.glob(os.path.join(REPO, "viable_tf", "learners", "*.py"))):
        for node in ast.walk(ast.parse(_read(path))):
            if name := name_of(node):
                found.append(f"{os.path.relpath(path, REPO)}:{node.lineno} {name}")
    return found


def probe(node) -> str | None:
    """What asks an object what it is instead of using what it declares: isinstance,
    hasattr or getattr; a handler of AttributeError (a probe by try); a class's name
    (`type(x).__name__`, `type(x) is C`, `x.__class__`)."""
    if isinstance(node, ast.Call):
        function = node.func
        if isinstance(function, ast.Name) and function.id in ("isinstance", "hasattr", "getattr"):
            return function.id
    if isinstance(node, ast.ExceptHandler) and node.type is not None:
        caught = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
        if any(isinstance(t, ast.Name) and t.id == "AttributeError" for t in caught):
            return "except AttributeError"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "type":
        return "type()"  # a class's identity or name: type(x).__name__, type(x) is C
    if isinstance(node, ast.Attribute) and node.attr == "__class__":
        return node.attr
    return None


def test_learners_do_not_probe_types_or_attributes():
    """A learner asks what it needs through what its parts declare (`capabilities`,
    `head.per_task`, a network's `penultimate_dim`, a feature part's `role`), never by
    isinstance, hasattr or getattr, a try on AttributeError or a class's name. A
    constructor argument of the wrong type is refused at the boundary by
    `configurable.expect`."""
    assert not (probes := _learner_nodes(probe)), probes


@pytest.mark.parametrize(
    "source",
    [
        "try:\n    w = net.penultimate_dim\nexcept AttributeError:\n    w = None",
        "try:\n    f()\nexcept (KeyError, AttributeError):\n    pass",
        "kinds = [type(p).__name__ for p in parts]",
        "same = part.__class__ is Outputs",
        "isinstance(head, Head)",
        "getattr(learner, 'head', None)",
    ],
)
def test_every_probe_form_is_caught(source):
    assert any(probe(node) for node in ast.walk(ast.parse(source)))


def test_every_learner_shows_every_argument_in_its_signature():
    """No `**kwargs` in a learner a user builds: its signature is what it takes (the mixin
    that adds the learned loss passes its base's arguments on, and each learner made with
    it names them all)."""
    import inspect

    import viable_tf.learners as learners
    from viable_tf.learners.base import Learner

    concrete = [
        cls
        for cls in vars(learners).values()
        if inspect.isclass(cls) and issubclass(cls, Learner) and not inspect.isabstract(cls)
    ]
    assert len(concrete) >= 6
    for cls in concrete:
        kinds = [p.kind for p in inspect.signature(cls.__init__).parameters.values()]
        assert inspect.Parameter.VAR_KEYWORD not in kinds, cls.__name__


def test_learners_call_no_method_past_the_mro():
    """`Base.method(self, ...)` skips what a subclass (or a mixin before Base) defines:
    a learner calls `self.method` or `super().method` instead."""

    def past_the_mro(call):
        function, args = call.func, call.args
        if (
            isinstance(function, ast.Attribute)
            and isinstance(function.value, ast.Name)
            and function.value.id[:1].isupper()
            and args
            and isinstance(args[0], ast.Name)
            and args[0].id == "self"
        ):
            return function.value.id
        return None

    assert not (calls := _learner_calls(past_the_mro)), calls


def test_benchmarks_share_timing_and_import_no_script_or_private_name():
    scripts = {
        os.path.splitext(os.path.basename(p))[0]
        for p in glob.glob(os.path.join(REPO, "benchmarks", "*.py"))
    }
    assert "timing" in scripts
    for name in sorted(scripts - {"timing"}):
        path = os.path.join(REPO, "benchmarks", f"{name}.py")
        source = _read(path)
        tree = ast.parse(source)
        imported = {
            node.module.split(".")[0] if isinstance(node, ast.ImportFrom) else alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in node.names
            if not isinstance(node, ast.ImportFrom) or node.module
        }
        assert imported & (scripts - {"timing"}) == set(), f"{name} imports another script"
        assert "timing" in imported, f"{name} does not use benchmarks/timing.py"
        private = {
            node.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and not (isinstance(node.value, ast.Name) and node.value.id == "args")
        }
        assert private == set(), f"{name} reaches private names: {sorted(private)}"
        # serving_load times each request of its load (latency percentiles), not a loop
        assert "perf_counter" not in source or name == "serving_load", name


def test_an_unregistered_task_family_is_one_clear_error():
    from viable_tf.evaluation import test_protocol, validation_protocol
    from viable_tf.tasks.base import TaskFamily

    class Coins(TaskFamily):
        input_dim, output_dim, task_loss = 1, 1, "mse"

        def sample(self, seed, batch_size):
            raise NotImplementedError

        def hparams(self):
            return {}

        def warmup_inputs(self, rng, *, num_support, num_query):
            return {}

    for protocol in (validation_protocol, test_protocol):
        with pytest.raises(TypeError, match=r"no \w+ is registered for Coins"):
            protocol(Coins())


def _is_tf_function(node) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "function"
        and (isinstance(node.value, ast.Name) and node.value.id == "tf")
    )


def test_graph_functions_are_traced_without_autograph():
    """AutoGraph converts a graph function's Python, and every function it calls, at each
    start-up: ~2 s of a sine training's 10 s, for loops that are tf.while_loops already.
    So each `tf.function` of the library says `autograph=False`, but for the one whose
    Python loop is its point (the summaries' `summary_points`)."""
    sites, converted = 0, []
    for path in glob.glob(os.path.join(REPO, "viable_tf", "**", "*.py"), recursive=True):
        for node in ast.walk(ast.parse(_read(path))):
            if not isinstance(node, ast.Call):
                continue
            partial = (
                isinstance(node.func, ast.Attribute)
                and node.func.attr == "partial"
                and node.args
                and _is_tf_function(node.args[0])
            )
            if not (_is_tf_function(node.func) or partial):
                continue
            sites += 1
            options = {k.arg: k.value for k in node.keywords}
            off = isinstance(options.get("autograph"), ast.Constant) and (
                options["autograph"].value is False
            )
            first = node.args[1 if partial else 0] if len(node.args) > partial else None
            if not off and not (isinstance(first, ast.Name) and first.id == "summary_points"):
                converted.append(f"{os.path.relpath(path, REPO)}:{node.lineno}")
    assert sites >= 6
    assert converted == []


def _example(heading: str) -> str:
    """The Python block under `heading` in docs/ARCHITECTURE.md."""
    text = _read(os.path.join(REPO, "docs", "ARCHITECTURE.md"))
    after = text[text.index(heading) :]
    return after[after.index("```python") + len("```python") : after.index("```\n", 10)]


def test_the_architecture_pages_examples_of_a_new_learner_and_head_work():
    import gin
    import numpy as np
    import tensorflow as tf

    from viable_tf.configurable import keras_configurable
    from viable_tf.learners import CAVIA, AdaptedState, Head, LinearHead
    from viable_tf.learners.base import Capabilities
    from viable_tf.learners.gradient import GradientLearner
    from viable_tf.networks import PredictionNetwork
    from viable_tf.tasks import SineTasks, seed_for

    namespace = dict(
        gin=gin,
        tf=tf,
        keras_configurable=keras_configurable,
        AdaptedState=AdaptedState,
        Head=Head,
        GradientLearner=GradientLearner,
        LinearHead=LinearHead,
        Capabilities=Capabilities,
        PredictionNetwork=PredictionNetwork,
    )
    with gin.unlock_config():
        exec(_example("**Adding a learner**"), namespace)
        exec(_example("**Adding a head**"), namespace)
    batch = SineTasks(num_support=5).sample(seed_for(0, 0), 3)
    learner = namespace["BiasOnly"](input_dim=1, output_dim=1, num_inner_steps=1, inner_lr=0.1)
    state = learner.adapt(batch.support_x, batch.support_y, batch.support_mask)
    assert state.weights[0].shape == (3, 1) and np.abs(state.weights[0].numpy()).max() > 0
    loss, _ = learner.meta_loss(batch)
    assert np.isfinite(loss.numpy())
    cavia = CAVIA(input_dim=1, output_dim=1, head=namespace["NormalisedLinearHead"]())
    assert "head_scale" in [v.name for v in cavia.trainable_variables]
    with tf.GradientTape() as tape:
        loss, _ = cavia.meta_loss(batch)
    (grad,) = tape.gradient(loss, [v for v in cavia.trainable_variables if v.name == "head_scale"])
    assert np.isfinite(loss.numpy()) and grad is not None


#: Public names that begin with an underscore: a namedtuple's methods, os._exit.
PUBLIC_UNDERSCORED = {"_asdict", "_replace", "_fields", "_make", "_exit"}


@pytest.mark.parametrize("package", ["viable_tf", "serving"])
def test_no_private_attribute_of_another_object_is_used(package):
    """The library and the server use no private API of TensorFlow, Keras, aiohttp or each
    other (`x._name` where x is not self or cls, `getattr(x, "_name")`), and probe nothing
    by a try on AttributeError; where a private call would buy speed, a
    benchmark has to show it is worth more than 10% first (docs/PERFORMANCE.md)."""
    found = []
    for path in sorted(glob.glob(os.path.join(REPO, package, "**", "*.py"), recursive=True)):
        if path.endswith("_pb2.py"):
            continue
        for node in ast.walk(ast.parse(_read(path))):
            private = (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and node.attr not in PUBLIC_UNDERSCORED
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            )
            # getattr(x, "_name"): a private name reached through a string.
            by_name = (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr", "setattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and str(node.args[1].value).startswith("_")
            )
            # A probe by try, anywhere: a part declares what it offers instead.
            by_try = isinstance(node, ast.ExceptHandler) and probe(node) is not None
            if private or by_name or by_try:
                found.append(
                    f"{os.path.relpath(path, REPO)}:{node.lineno} {ast.unparse(node)[:80]}"
                )
    assert not found, found
