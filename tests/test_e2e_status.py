"""lab/e2e_status.py --pace: a run's training query loss and validation read back from
its summaries, across the events files of a resumed run."""

import os

import pytest
import tensorflow as tf
from conftest import load_tool


def _tool():
    return load_tool("e2e_status")


def _write(model_dir, points):
    """One events file per call, as each resumption of a run writes its own."""
    writer = tf.summary.create_file_writer(str(model_dir), filename_suffix=f".{len(points)}")
    with writer.as_default():
        for tag, step, value in points:
            tf.summary.scalar(tag, value, step=step)
    writer.close()


def test_pace_reads_the_window_mean_and_the_validation_at_each_step(tmp_path):
    run = tmp_path / "runs" / "some_run"
    run.mkdir(parents=True)
    # Before the interruption: losses every 100 updates, validations every 500.
    _write(
        run,
        [("train/meta_loss", step, step / 1000) for step in range(100, 1100, 100)]
        + [("validation/accuracy", 500, 0.5), ("validation/accuracy", 1000, 0.6)],
    )
    # Resumed: later points in a second file.
    _write(
        run,
        [("train/meta_loss", step, 2.0) for step in range(1100, 2100, 100)]
        + [("validation/accuracy", 1500, 0.4), ("validation/accuracy", 2000, 0.7)],
    )
    tool = _tool()
    row = tool.pace(str(run), [1000, 2000, 3000])
    assert row["run"] == "some_run"
    # mean of 0.1 .. 1.0 over (0, 1000]; of ten 2.0s over (1000, 2000]; nothing at 3000.
    assert row["1000"] == "60.0 / 0.550"
    assert row["2000"] == "70.0 / 2.000"
    assert row["3000"] == " / "
    # after 500 updates: 0.6, 0.4, 0.7 -> |changes| 0.2, 0.3 -> 25 points on average.
    assert tool.unsteadiness(tool.validation_curve(str(run)), after=500) == pytest.approx(0.25)
    assert tool.unsteadiness([(600, 0.5)], after=500) is None
    # Over a stretch: (500, 1500] holds 0.6 and 0.4.
    assert tool.unsteadiness(tool.validation_curve(str(run)), 500, 1500) == pytest.approx(0.2)
    assert tool.pace(str(run), [1000], (500, 1500))["unsteadiness"] == "20.00"


def test_plot_draws_every_matched_run_from_its_resumed_events(tmp_path):
    """--plot: one line per run, its points read across the events files of a resumption."""
    runs = []
    for name, values in (("a_20way1shot", (0.1, 0.2, 0.3)), ("b_20way1shot", (0.5, 0.6, 0.7))):
        run = tmp_path / "runs" / name
        run.mkdir(parents=True)
        _write(run, [("validation/accuracy", 500, values[0])])
        _write(
            run,
            [("validation/accuracy", s, v) for s, v in zip((1000, 1500), values[1:], strict=True)],
        )
        runs.append(str(run))
    path = tmp_path / "curves.png"
    _tool().plot(runs, str(path), "test")
    from matplotlib import image

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width = image.imread(str(path)).shape[:2]
    assert width > height  # drawn, wide


def test_run_dirs_are_the_matching_directories_not_the_logs_beside_them(tmp_path):
    for name in ("cavia_20way5shot_clean_mean", "cavia_5way5shot_clean_mean"):
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / f"{name}.out").write_text("log")
    other = tmp_path / "other"
    (other / "runs" / "maml_20way1shot").mkdir(parents=True)
    found = _tool().run_dirs([str(tmp_path), str(other)], "20way")
    assert [os.path.relpath(d, tmp_path) for d in found] == [
        os.path.join("other", "runs", "maml_20way1shot"),
        os.path.join("runs", "cavia_20way5shot_clean_mean"),
    ]


def test_status_names_the_jumps_of_the_training_loss(tmp_path):
    """A 100-update mean far above its neighbours is a jump (relVIABLE's exploding
    meta-batch at 20 ways); the early fall, a steady curve's noise and a small loss's
    doubling are not."""
    tool = _tool()
    steady = [(step, 2.2 + 0.05 * (-1) ** (step // 100)) for step in range(100, 3100, 100)]
    early = [(100, 9.0), (200, 5.0), *steady[2:]]  # the first 1,000 updates fall fast
    assert tool.jumps(steady) == [] and tool.jumps(early) == []
    spiked = [(step, 5.6 if step == 1900 else value) for step, value in steady]
    assert tool.jumps(spiked) == [1900]
    # Two jumps side by side are both named; a level shift that lasts is not a jump.
    assert tool.jumps([(s, 9.0 if s in (1900, 2000) else v) for s, v in steady]) == [1900, 2000]
    shifted = [(step, value + (2.0 if step >= 1500 else 0.0)) for step, value in steady]
    assert tool.jumps(shifted) == []
    # A converged run's small losses vary by more than 1.3x through sampling alone.
    small = [(step, 0.02 * (2.0 if step == 1900 else 1.0)) for step, _ in steady]
    assert tool.jumps(small) == []

    run = tmp_path / "runs" / "spiky_run"
    run.mkdir(parents=True)
    _write(
        run, [("train/meta_loss", s, v) for s, v in spiked] + [("validation/accuracy", 500, 0.3)]
    )
    row = tool.status(str(run))
    assert row["loss_jumps"] == "1900" and row["best"] == 30.0


def test_a_record_says_where_the_training_loss_jumped_after_its_best_weights(tmp_path):
    """lab/records.py's `setback`: jumps after the weights a figure is from (spans of
    consecutive points as one), none for jumps the run came back past, nor without
    summaries."""
    from lab import records

    steady = [(step, 2.2 + 0.05 * (-1) ** (step // 100)) for step in range(100, 6100, 100)]
    spikes = {1900: 9.0, 3200: 9.0, 3300: 9.0, 3400: 9.0, 5000: 30.0}
    run = tmp_path / "run"
    run.mkdir()
    _write(run, [("train/meta_loss", s, spikes.get(s, v)) for s, v in steady])
    assert records.setback(str(run), 2500, 6000) == (
        "its training loss jumped from 3,200 to 3,400 and at 5,000 updates, after its best "
        "weights, and it ended at 6,000; the figure is its weights at 2,500"
    )
    assert records.setback(str(run), 5500, 6000) is None  # every jump before the best
    assert records.setback(str(tmp_path), 2500, 6000) is None  # no summaries


def test_a_cell_trained_again_keeps_its_label_command_and_config_and_names_the_earlier_run():
    """lab/records.py's --again: the record of a cell trained again on today's form takes
    label, command and config from the record it replaces, says why and what that one
    measured, and keeps the records' field order; a record on today's form has nothing to
    replace."""
    from lab import records

    earlier = {
        **{"benchmark": "b", "setting": "5way1shot", "method": "m", "label": "M (old)"},
        **{"command": "python -m x --methods=m", "config": "c.gin", "commit": "abc1234"},
        **{"machine": "AMD EPYC, 2 cores", "date": "2026-11-26", "metric": "accuracy"},
        **{"mean": 0.9461, "ci95": 0.0043, "updates": 22500, "best_at": 17500},
        "data_form": "l2-normalised pixels, a character's drawings in one order",
    }
    run = {
        **{"benchmark": "b", "setting": "5way1shot", "method": "m", "commit": "def5678"},
        **{"machine": "Zen 4, 2 cores", "date": "2026-12-07", "metric": "accuracy"},
        **{"mean": 0.95, "ci95": 0.004, "updates": 20000, "best_at": 15000, "per_task": [1.0]},
    }
    again = records.trained_again(run, earlier, "for pairs with P")
    assert list(again) == [
        *("benchmark", "setting", "method", "label", "command", "config", "commit"),
        *("machine", "detail", "date", "metric", "mean", "ci95", "updates", "best_at"),
        "per_task",
    ]
    assert (again["label"], again["command"], again["config"]) == (
        "M (old)",
        "python -m x --methods=m",
        "c.gin",
    )
    assert (again["commit"], again["mean"], "data_form" in again) == ("def5678", 0.95, False)
    relabelled = records.trained_again({**run, "label": "M (new)"}, earlier, "why")
    assert (relabelled["label"], relabelled["config"]) == ("M (new)", "c.gin")  # given: kept
    assert again["detail"] == (
        "trained again on today's form of the data, for pairs with P: the earlier-form run "
        "(commit abc1234, 2026-11-26, AMD EPYC, 2 cores, l2-normalised pixels) measured "
        "94.6 \u00b1 0.4 at 22,500 updates, best at 17,500"
    )
    mse = {**earlier, "metric": "mse", "mean": 0.0315, "ci95": 0.0042}
    assert "measured 0.032 \u00b1 0.004 at" in records.trained_again(run, mse, "why")["detail"]
    today = {k: v for k, v in earlier.items() if k != "data_form"}
    with pytest.raises(ValueError, match="m at 5way1shot: already on today's form"):
        records.trained_again(run, today, "why")


def test_a_record_needs_its_label_and_command_or_an_earlier_form_to_train_again(
    monkeypatch, capsys
):
    from lab import records

    argv = ["records", "run", "--benchmark=b", "--setting=s", "--method=m", "--commit=c"]
    monkeypatch.setattr("sys.argv", argv)
    with pytest.raises(SystemExit):
        records.main()
    assert "--label and --command required (or --again WHY)" in capsys.readouterr().err
    # --again refuses, in one line and before reading the run, a cell with no record and
    # one whose record is on today's form (the Prototypical Network's, trained again).
    for key, said in (
        ("b/s/m", "no record b/s/m to train again"),
        ("omniglot_images/5way1shot/protonet", "is on today's form already"),
    ):
        bench, setting, method = key.split("/")
        named = [f"--benchmark={bench}", f"--setting={setting}", f"--method={method}"]
        argv = ["records", "/no/such/run", *named, "--commit=c", "--again=why"]
        monkeypatch.setattr("sys.argv", argv)
        with pytest.raises(SystemExit):
            records.main()
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err, err
