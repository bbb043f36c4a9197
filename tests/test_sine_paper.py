"""The sine reproduction driver: what it plans, and one miniature end-to-end run."""

import json
import os
import subprocess
import sys

import pytest

from viable_tf.experiments import sine_paper, sine_report

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_plan_covers_every_experiment():
    runs = sine_paper.plan(num_steps=50_000, seeds=(0, 1, 2), extra_params=[])
    names = {run.name for run in runs}
    rows_a, rows_b = sine_paper.ROWS_A, sine_paper.ROWS_B
    expected = 5 * len(rows_a) + len(rows_b) + 2 * len(rows_b) + 3 + len(sine_paper.VARIATIONS)
    assert len(runs) == len(names) == expected
    assert {"relviable_relu", "relviable_tanh", "simviable_relu", "simviable_tanh"} <= set(rows_b)
    for key in rows_a:
        assert {f"a_context/{key}_c{c}" for c in range(1, 6)} <= names
    for key in rows_b:
        assert f"b_vark/{key}" in names
        assert {f"seeds/{key}_seed1", f"seeds/{key}_seed2"} <= names
    vark = [run for run in runs if run.name.startswith("b_vark/")]
    assert all(run.eval_shots == (0, 1, 2, 3, 4, 20) for run in vark)
    assert all(
        run.config.endswith(f"_vark_{run.row.split('_')[-1]}.gin")
        for run in vark
        if "viable" in run.row
    )
    assert all("NUM_STEPS=50000" in run.params for run in runs)
    for name in ("investigation/double_length_relu", "long/relviable_tanh_seed2"):
        longer = next(r for r in runs if r.name == name)
        assert longer.params[-1] == "NUM_STEPS=100000"  # after the default: it wins
    keras = next(r for r in runs if r.name == "investigation/keras_init_relu")
    assert keras.config == "sine/relviable_relu.gin" and "INIT='keras'" in keras.params
    assert runs[0].name == "b_vark/relviable_tanh"  # the slowest first (400 pairs, tanh)
    some = sine_paper.plan(
        num_steps=50, seeds=(0, 1), extra_params=[], rows=("cavia", "relviable_tanh")
    )
    assert {run.row for run in some} == {"cavia", "relviable_tanh"}
    assert "investigation/keras_init_tanh" in {run.name for run in some}
    assert "investigation/keras_init_relu" not in {run.name for run in some}


@pytest.mark.slow
def test_miniature_reproduction_end_to_end(tmp_path, monkeypatch, run_cli):
    work, report = tmp_path / "work", tmp_path / "report"
    command = [
        os.path.join(os.path.dirname(sys.executable), "viable-sine-paper"),
        f"--work_dir={work}",
        f"--report_dir={report}",
        "--num_steps=20",
        "--jobs=0",  # the runs in the driver's process: one TensorFlow start, not eleven
        "--context_dims=5",
        "--seeds=0,1",
        "--no_investigate",
        "--rows=cavia,relviable_tanh",
        "--gin_param=EvaluationSpec.eval_every=10",
        # the driver is tested, not XLA: no compile
        "--gin_param=PerformanceSpec.jit_compile=False",
        "--gin_param=test_evaluator.num_tasks=20",
        "--gin_param=validation_evaluator.num_tasks=10",
    ]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((work / "summary.json").read_text())
    assert set(summary["b_vark"]["relviable_tanh"]["by_k"]) == {"0", "1", "2", "3", "4", "20"}
    assert summary["b_vark"]["relviable_tanh"]["hparams"]["activation"] == "tanh"
    assert summary["b_vark"]["relviable_tanh"]["hparams"]["min_support"] == 0
    assert "relviable_relu_c5" not in summary["a_context"]  # --rows
    assert summary["a_context"]["cavia_c5"]["hparams"]["init"] == "torch"
    assert summary["a_context"]["cavia_c5"]["method"] == "cavia"
    assert summary["seeds"]["cavia_seed1"]["seed"] == 1
    assert (report / "sine_adapted_k4.png").stat().st_size > 10_000
    assert (report / "sine_inner_loss.png").stat().st_size > 10_000
    tables = (report / "sine_tables.md").read_text()
    assert "| relVIABLE (tanh) |" in tables and "K = 20" in tables
    reference = json.loads((report / "sine_reference.json").read_text())
    assert reference["rows"]["cavia"]["mean"] == summary["a_context"]["cavia_c5"]["mean"]
    assert reference["setting"] == {"context_dim": 5, "num_support": 10, "num_steps": 20}
    # Rerunning finds every run done but one evaluation, which it runs in a process of
    # its own (--jobs=1, the default form), and redraws the report (the driver in this
    # process: the first run was the whole-process check).
    (report / "sine_tables.md").unlink()
    evaluation = next((work / "b_vark").glob("relviable_tanh*/eval_k20.json"))
    evaluation.unlink()
    monkeypatch.chdir(REPO)
    status, _ = run_cli(sine_paper, [*(a for a in command[1:] if a != "--jobs=0"), "--jobs=1"])
    assert status == 0
    assert json.loads(evaluation.read_text())["num_support"] == 20
    assert "| relVIABLE (tanh) |" in (report / "sine_tables.md").read_text()
    assert json.loads((work / "summary.json").read_text())["a_context"] == summary["a_context"]


def test_reference_lines_set_a_run_beside_the_reproduction():
    table = {
        "setting": {"context_dim": 5, "num_support": 10, "num_steps": 50_000},
        "rows": {
            "cavia": {"label": "CAVIA", "mean": 0.2, "ci95": 0.02, "seed_means": [0.2, 0.21]},
            "simviable_tanh": {
                "label": "simVIABLE (tanh)",
                "mean": 0.1,
                "ci95": 0.01,
                "seed_means": [0.1, 0.1],
            },
            "relviable_tanh": {
                "label": "relVIABLE (tanh)",
                "mean": 0.03,
                "ci95": 0.003,
                "seed_means": [0.03, 0.031],
            },
        },
    }
    hparams = {
        "method": "relviable",
        "activation": "tanh",
        "context_dim": 5,
        "num_support": 10,
        "min_support": 10,
    }
    lines = sine_report.reference_lines({"metric": "mse", "hparams": hparams}, table)
    assert "50,000 meta-updates" in lines[0]
    assert lines[1].split() == ["CAVIA", "0.200", "+-", "0.020", "(seeds:", "0.200,", "0.210)"]
    assert lines[2].endswith("<- this method") and "relVIABLE (tanh)" in lines[2]
    assert len(lines) == 3  # CAVIA and relVIABLE only
    for other in (
        {"context_dim": 3},
        {"min_support": 0, "num_support": 20},
        {"outliers": 2},  # corrupted support sets are another setting
        {"noise_std": 0.5},
    ):
        record = {"metric": "mse", "hparams": {**hparams, **other}}
        assert sine_report.reference_lines(record, table) == []
    assert sine_report.reference_lines({"metric": "accuracy", "hparams": hparams}, table) == []


def test_the_package_ships_the_reproductions_reference():
    table = sine_report.shipped_reference()
    assert table is not None, "viable_tf/experiments/sine_reference.json is missing"
    assert table["setting"] == {"context_dim": 5, "num_support": 10, "num_steps": 50_000}
    assert {"cavia", "relviable_relu", "relviable_tanh"} <= set(table["rows"])


def test_beyond_plan_runs_every_method_at_every_seed_and_with_varying_k():
    from viable_tf.experiments import sine_beyond

    runs = sine_beyond.plan(methods=tuple(sine_beyond.METHODS), seeds=(0, 1, 2), extra_params=[])
    names = {run.name for run in runs}
    assert len(runs) == len(names) == 4 * len(sine_beyond.METHODS)
    for key, method in sine_beyond.METHODS.items():
        assert {f"seeds/{key}_seed{s}" for s in (0, 1, 2)} <= names
        vark = next(run for run in runs if run.name == f"vark/{key}")
        assert vark.config == method.vark_config and vark.eval_shots == (0, 1, 2, 3, 4, 20)
        seed2 = next(run for run in runs if run.name == f"seeds/{key}_seed2")
        assert seed2.config == method.config and "SEED=2" in seed2.params
    assert runs[0].name == "vark/maml_relviable"  # the slowest first
    one = sine_beyond.plan(methods=("cavia",), seeds=(0,), extra_params=["NUM_STEPS=7"])
    assert [run.name for run in one] == ["vark/cavia", "seeds/cavia_seed0"]
    assert all(run.params[0] == "NUM_STEPS=7" for run in one)


def test_beyond_tables_put_each_method_beside_cavia():
    from viable_tf.experiments import sine_beyond

    def record(mean, step=500):
        return {"mean": mean, "ci95": 0.01, "train_and_eval_seconds": 12.0, "checkpoint_step": step}

    methods, seeds = ("cavia", "attviable"), (0, 1)
    summary = {
        "seeds": {
            f"{k}_seed{s}": record(m + s / 100)
            for k, m in (("cavia", 0.2), ("attviable", 0.1))
            for s in seeds
        },
        "vark": {
            k: {
                **record(0.3, 1000),
                "by_k": {str(n): record(1 / (n + 1)) for n in (0, 1, 2, 3, 4, 20)},
            }
            for k in methods
        },
    }
    text = sine_beyond.tables(summary, methods, seeds)
    assert "| attVIABLE | 0.100 ± 0.010 | 0.110 ± 0.010 | 0.105 | 0.007 | 0.51 |" in text
    assert "| CAVIA | 0.200 ± 0.010 | 0.210 ± 0.010 | 0.205 | 0.007 | 1.00 |" in text
    assert "| attVIABLE | 1.000 ± 0.010 | 0.500 ± 0.010 |" in text
    assert "| attVIABLE | 12 s | 12 s | 500, 500, 1,000 |" in text


def test_beyond_tables_mark_the_runs_not_finished(tmp_path):
    from viable_tf.experiments import sine_beyond

    runs = sine_beyond.plan(methods=("cavia",), seeds=(0, 1), extra_params=[])
    done = tmp_path / "seeds" / "cavia_seed0"
    done.mkdir(parents=True)
    record = {"mean": 0.2, "ci95": 0.01, "train_and_eval_seconds": 9.0, "checkpoint_step": 500}
    (done / "results.json").write_text(json.dumps(record))
    (tmp_path / "vark" / "cavia").mkdir(parents=True)  # started: no results yet
    summary = sine_beyond.collect(runs, str(tmp_path), finished_only=True)
    assert set(summary["seeds"]) == {"cavia_seed0"} and summary["vark"] == {}
    text = sine_beyond.tables(summary, ("cavia",), (0, 1))
    assert "| CAVIA | 0.200 ± 0.010 | not run yet | — | — | — |" in text
    assert "| CAVIA | 9 s | not run yet | 500 |" in text
