"""A plain (non-editable) install works away from the checkout: configs ship in the wheel."""

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(command, **kwargs):
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, (command, result.stdout[-2000:], result.stderr[-3000:])
    return result


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_trains_from_another_directory(tmp_path):
    # Built from a copy of the sources alone: a checkout's own build/ folder (setuptools
    # reuses it) or runs could otherwise leak into the wheel.
    source = tmp_path / "source"
    shutil.copytree(
        REPO,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "runs", "*.egg-info", "__pycache__"
        ),
    )
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(source)])
    (wheel,) = wheels.glob("viable_tf-*.whl")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    # The dependencies (TensorFlow, ...) come from this environment's site-packages, read
    # as a plain path: its editable-install hook (a .pth there) does not run in the venv.
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    deps = [p for p in site.getsitepackages() if os.path.isdir(p)] or [
        sysconfig.get_paths()["purelib"]
    ]
    with open(os.path.join(purelib.stdout.strip(), "deps.pth"), "w") as f:
        f.write("\n".join(deps) + "\n")
    # Where a plain `pip install` puts gin-config: site-packages/gin, beside the package.
    os.makedirs(os.path.join(purelib.stdout.strip(), "gin"))
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            str(wheel),
        ]
    )

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = _run(
        [
            str(python),
            "-c",
            "import viable_tf, viable_tf.config as c; "
            "print(viable_tf.__file__); print(c.resolve('sine/relviable.gin')); "
            "print(c.resolve('gin/omniglot/relviable_5way1shot.gin')); "
            "print(*c.config_roots())",
        ],
        cwd=elsewhere,
        env=env,
    ).stdout.split()
    assert all(path.startswith(str(venv)) for path in where), where
    # Only the package's own configs: site-packages/gin beside it is gin-config's folder.
    assert where[3:] == [os.path.join(os.path.dirname(where[0]), "gin")], where
    # Every config the experiment drivers name is shipped.
    _run(
        [
            str(python),
            "-c",
            "from viable_tf import config; "
            "from viable_tf.experiments import sine_paper as s, sine_report as r; "
            "[config.resolve(n) for r in s.ROWS.values() for n in (r.config, r.vark_config) if n]; "
            "assert r.shipped_reference() is not None",
        ],
        cwd=elsewhere,
        env=env,
    )
    # The shipped models, every file of their exports, and the image configs.
    shipped = _run(
        [str(python), "-m", "viable_tf.pretrained"], cwd=elsewhere, env=env
    ).stdout.splitlines()
    source_models = os.path.join(REPO, "viable_tf", "pretrained")
    names = sorted(d for d in os.listdir(source_models) if not d.startswith(("_", ".")))
    assert [line.split()[0] for line in shipped] == names, shipped
    for line in shipped:
        name, base = line.split()[:2]
        assert base.startswith(str(venv)), line
        for root, _, files in os.walk(os.path.join(source_models, name)):
            for f in files:
                relative = os.path.relpath(os.path.join(root, f), source_models)
                assert os.path.isfile(os.path.join(os.path.dirname(base), relative)), relative
    _run(
        [str(python), "-c", "from viable_tf import config; config.resolve('images/protonet.gin')"],
        cwd=elsewhere,
        env=env,
    )
    train = _run(
        [
            str(venv / "bin" / "viable-train"),
            "--gin_file=sine/relviable.gin",
            "--gin_param=NUM_STEPS=200",
            "--gin_param=EvaluationSpec.eval_every=100",
            "--gin_param=test_evaluator.num_tasks=50",
            "--gin_param=Trainer.show_progress=False",
            "--model_dir=run",
        ],
        cwd=elsewhere,
        env=env,
    )
    record = json.loads((elsewhere / "run" / "results.json").read_text())
    assert record["steps_trained"] == 200 and record["method"] == "relviable"
    # The console starts with the tool's own output, not TensorFlow's C++ log lines.
    assert "I0000" not in train.stderr and "cuInit" not in train.stderr, train.stderr[:500]
