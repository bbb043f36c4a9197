"""lab/corruption_table.py --noise_std: the Gaussian-noise table's runs (each method clean,
sharing the outlier table's run, and with the noise) and its cells (each run tested at
both stds), with the training and the testing stubbed."""

import json
import sys

import pytest
from conftest import load_tool


def test_noise_table_trains_each_method_clean_and_noisy_and_tests_each_at_both(
    tmp_path, capsys, monkeypatch
):
    tool = load_tool("corruption_table")
    trained, tested = [], []

    def train(work_dir, run, config, bindings, steps):
        trained.append((run, config, bindings, steps))
        return f"{work_dir}/runs/{run}"

    def test(model_dir, outliers, num_support=None, noise_std=0.0):
        tested.append((model_dir.rsplit("/", 1)[1], outliers, noise_std))
        # an MSE that names its run and its test: 1 + std trained, + 10 x std tested
        noisy = model_dir.endswith("_s0.5")
        return {"mean": 1.0 + 0.5 * noisy + 10 * noise_std, "ci95": 0.01}

    monkeypatch.setattr(tool, "train", train)
    monkeypatch.setattr(tool, "test", test)
    argv = ["corruption_table", "--work_dir", str(tmp_path), "--methods", "cavia_huber,relviable"]
    monkeypatch.setattr(sys, "argv", [*argv, "--noise_std", "0.5", "--jobs", "1"])
    tool.main()

    assert sorted((run, bindings[-2:]) for run, _, bindings, _ in trained) == [
        ("cavia_huber_train_m0", ("OUTLIERS=0", "NOISE_STD=0.0")),
        ("cavia_huber_train_s0.5", ("OUTLIERS=0", "NOISE_STD=0.5")),
        ("relviable_train_m0", ("OUTLIERS=0", "NOISE_STD=0.0")),
        ("relviable_train_s0.5", ("OUTLIERS=0", "NOISE_STD=0.5")),
    ]
    # the robust baseline keeps its inner loss (its config) in both runs
    assert all(c == "sine/cavia_huber.gin" for r, c, _, _ in trained if r.startswith("cavia"))
    assert sorted(tested) == sorted(
        (f"{m}_train_{t}", 0, s)
        for m in ("cavia_huber", "relviable")
        for t in ("m0", "s0.5")
        for s in (0.0, 0.5)
    )
    out = capsys.readouterr().out
    assert out.splitlines()[0] == (
        "| method | trained s=0, tested s=0 | trained s=0, tested s=0.5 "
        "| trained s=0.5, tested s=0 | trained s=0.5, tested s=0.5 |"
    )
    assert "| relVIABLE | 1.000 ± 0.010 | 6.000 ± 0.010 | 1.500 ± 0.010 | 6.500 ± 0.010 |" in out
    assert (tmp_path / "table_s0.5.md").read_text() == out.rstrip("\n") + "\n"
    assert "oracle" not in out


def test_noise_table_refuses_a_std_that_is_no_noise(tmp_path, monkeypatch, capsys):
    tool = load_tool("corruption_table")
    monkeypatch.setattr(
        sys, "argv", ["corruption_table", "--work_dir", str(tmp_path), "--noise_std", "0"]
    )
    with pytest.raises(SystemExit):
        tool.main()
    assert "--noise_std must be > 0, got 0.0" in capsys.readouterr().err


def test_a_test_record_is_read_back_under_its_noise(tmp_path):
    """Resuming: the clean test keeps the outlier table's file name; a noisy one has its own."""
    tool = load_tool("corruption_table")
    (tmp_path / "test_m0.json").write_text(json.dumps({"mean": 0.1, "ci95": 0.01}))
    (tmp_path / "test_m0_s0.5.json").write_text(json.dumps({"mean": 0.2, "ci95": 0.01}))
    assert tool.test(str(tmp_path), 0)["mean"] == 0.1
    assert tool.test(str(tmp_path), 0, noise_std=0.5)["mean"] == 0.2
