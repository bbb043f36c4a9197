"""The sine reproduction driver: what it plans, and one miniature end-to-end run."""

import json
import os
import subprocess
import sys

from viable_tf.experiments import sine_paper

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_plan_covers_every_experiment():
    runs = sine_paper.plan(num_steps=50_000, seeds=(0, 1, 2), extra_params=[])
    names = {run.name for run in runs}
    assert len(runs) == len(names) == 20 + 3 + 6 + len(sine_paper.VARIATIONS)
    longer = next(r for r in runs if r.name == "investigation/double_length")
    assert longer.params[-1] == "NUM_STEPS=100000"  # after the default: it wins
    for method in ("maml", "cavia", "simviable", "relviable"):
        assert {f"a_context/{method}_c{c}" for c in range(1, 6)} <= names
    for method in ("cavia", "simviable", "relviable"):
        assert f"b_vark/{method}" in names
        assert {f"seeds/{method}_seed1", f"seeds/{method}_seed2"} <= names
    vark = [run for run in runs if run.name.startswith("b_vark/")]
    assert all(run.eval_shots == (0, 1, 2, 3, 4, 20) for run in vark)
    assert all("NUM_STEPS=50000" in run.params for run in runs)


def test_miniature_reproduction_end_to_end(tmp_path):
    work, report = tmp_path / "work", tmp_path / "report"
    command = [
        os.path.join(os.path.dirname(sys.executable), "viable-sine-paper"),
        f"--work_dir={work}",
        f"--report_dir={report}",
        "--num_steps=20",
        "--context_dims=5",
        "--seeds=0,1",
        "--no_investigate",
        "--gin_param=Trainer.eval_every=10",
        "--gin_param=test_evaluator.num_tasks=20",
        "--gin_param=validation_evaluator.num_tasks=10",
    ]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((work / "summary.json").read_text())
    assert set(summary["b_vark"]["relviable"]["by_k"]) == {"0", "1", "2", "3", "4", "20"}
    assert summary["a_context"]["maml_c5"]["method"] == "maml"
    assert summary["seeds"]["cavia_seed1"]["seed"] == 1
    assert (report / "sine_adapted_k4.png").stat().st_size > 10_000
    assert (report / "sine_inner_loss.png").stat().st_size > 10_000
    tables = (report / "sine_tables.md").read_text()
    assert "| relVIABLE |" in tables and "K = 20" in tables
    # Rerunning finds every run done and only redraws the report.
    again = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=env)
    assert again.returncode == 0
    assert json.loads((work / "summary.json").read_text())["a_context"] == summary["a_context"]
