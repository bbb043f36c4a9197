"""lab/noise_learner_table.py: the label-noise tables' cells read back from run
directories and the rules' Markdown, a later directory winning a cell."""

import json
import sys

from conftest import load_tool


def _run(root, name, mean, steps=20000):
    run = root / name
    run.mkdir(parents=True)
    (run / "results.json").write_text(
        json.dumps({"mean": mean, "ci95": 0.003, "steps_trained": steps, "checkpoint_step": 9000})
    )


def test_cells_rules_and_the_later_directory_win(tmp_path, capsys, monkeypatch):
    old, new = tmp_path / "runs", tmp_path / "runs_new"
    _run(old, "cavia_5way5shot_swap2_mean", 0.932)
    _run(old, "cavia_5way5shot_swap2_median", 0.960)
    _run(old, "relviable_relu64_5way5shot_swap2_median", 0.961)
    _run(new, "cavia_5way5shot_swap2_median", 0.9612)
    _run(old, "simviable_20way5shot_swap1_mean", 0.9)
    (old / "cavia_5way5shot_swap2_mean" / "eval_clean.txt").write_text(
        json.dumps({"mean": 0.985, "ci95": 0.002})
    )
    (old / "not_a_run").mkdir()
    rules = tmp_path / "rules.md"
    rules.write_text(
        "| support set | class mean | geometric median | weighted mean | oracle |\n"
        "| 5-way 5-shot, 2 swap shots per class "
        "| 91.5 ± 0.5 | 96.6 ± 0.3 | 93.0 ± 0.5 | 98.3 ± 0.2 |\n"
        "| 20-way 5-shot, 1 swap shot per class "
        "| 92.1 ± 0.2 | 93.8 ± 0.1 | 92.9 ± 0.2 | 94.3 ± 0.1 |\n"
    )
    tool = load_tool("noise_learner_table")
    found = tool.cells([str(old), str(new)])
    assert found[("5way5shot", "swap2", "median", "cavia")][1] == str(new)
    assert found[("5way5shot", "swap2", "median", "relviable_relu64")][1] == str(old)
    assert tool.rules(str(rules))[("20way5shot", "swap1")] == [
        "92.1 ± 0.2",
        "93.8 ± 0.1",
        "92.9 ± 0.2",
        "94.3 ± 0.1",
    ]

    monkeypatch.setattr(
        sys,
        "argv",
        [
            "noise_learner_table",
            "--runs",
            str(old),
            "--runs",
            str(new),
            "--rules",
            str(rules),
            "--dagger",
            str(old),
        ],
    )
    tool.main()
    out = capsys.readouterr().out
    assert "| geometric median | 96.6 ± 0.3 | 96.1 ± 0.3 | 96.1 ± 0.3 † |" in out
    assert "| class mean | 91.5 ± 0.5 | 93.2 ± 0.3 |  |" in out
    assert "20-way 5-shot, 1 of 5 shots per class swapped to another class of the episode" in out
    assert "| class mean | 92.1 ± 0.2 | 90.0 ± 0.3 |" in out
    # the model trained with the noise, tested on clean episodes: a row of its own, under
    # the noisy table it belongs to, and none where no run was tested clean
    assert "| class mean, tested clean |  | 98.5 ± 0.2 |  |" in out
    assert out.count("tested clean") == 1
