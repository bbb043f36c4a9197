"""The results records and the pages rendered from them (results/render.py): every record is
well formed, the committed pages are exactly what their records give, and the statistics
the tables print are checked against NumPy."""

import copy
import glob
import json
import os

import numpy as np
import pytest
from scipy import stats

from results import definitions, render, tables
from results import records as store
from results.tables import Verdict, Verdicts
from results.verdicts import BEST_VIABLE, GLANCE, VERDICTS


@pytest.fixture(scope="module")
def records():
    return store.load()


def test_every_record_is_well_formed_and_stored_under_its_own_keys(records):
    assert len(records) > 200
    for (benchmark, setting, method), record in records.items():
        assert (record["benchmark"], record["setting"], record["method"]) == (
            benchmark,
            setting,
            method,
        )
        if record.get("source") != "paper" and record["metric"] != "claim":
            assert record["commit"] and record["date"] and record["machine"]
            assert record["mean"] >= 0 and (record["metric"] != "accuracy" or record["mean"] <= 1)


def test_the_pages_are_what_their_records_give():
    """Fails when a page's table and its records disagree: rerun `python -m results.render`."""
    assert render.main(["--check"]) == 0


def test_a_changed_record_changes_the_page_and_a_stale_page_is_caught(records, tmp_path):
    page = "x\n<!-- results:sine_by_context -->\nold\n<!-- /results -->\ny\n"
    fresh = render.render_page(page, records)
    assert "old" not in fresh and "| relVIABLE (tanh) |" in fresh and fresh.endswith("y\n")
    changed = copy.deepcopy(records)
    changed["sine", "C5_K10_seed0", "cavia"]["mean"] = 0.5
    assert "0.500 ± 0.020" in render.render_page(page, changed)
    assert render.render_page(fresh, records) == fresh  # rendering again changes nothing


def test_an_unknown_table_and_a_misfiled_record_are_refused(tmp_path):
    with pytest.raises(ValueError, match="no table named 'nope'"):
        render.render_page("<!-- results:nope -->\n<!-- /results -->", {})
    folder = tmp_path / "sine" / "C1_K10_seed0"
    folder.mkdir(parents=True)
    record = {
        "benchmark": "sine",
        "setting": "C5_K10_seed0",
        "method": "cavia",
        "label": "CAVIA",
        "metric": "mse",
        "mean": 0.2,
        "command": "c",
        "commit": "abc",
        "date": "2026-01-01",
        "machine": "m",
    }
    (folder / "cavia.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match=r"expected sine/C5_K10_seed0/cavia\.json"):
        store.load(str(tmp_path))
    record["setting"] = "C1_K10_seed0"
    record.pop("commit")
    (folder / "cavia.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match="commit must be a non-empty str"):
        store.load(str(tmp_path))


def test_per_task_figures_must_give_the_recorded_mean_and_ci():
    values = np.random.default_rng(0).uniform(size=50)
    half = stats.t.ppf(0.975, 49) * values.std(ddof=1) / np.sqrt(50)
    record = {
        "benchmark": "b",
        "setting": "s",
        "method": "m",
        "label": "M",
        "metric": "accuracy",
        "mean": float(values.mean()),
        "ci95": float(half),
        "per_task": values.tolist(),
        "command": "c",
        "commit": "abc",
        "date": "d",
        "machine": "m",
    }
    assert store.check(record, os.path.join("b", "s", "m.json")) == []
    record["mean"] += 0.01
    assert "is not its per_task mean" in store.check(record, os.path.join("b", "s", "m.json"))[0]


def test_the_paired_difference_is_the_t_interval_of_the_task_by_task_differences():
    rng = np.random.default_rng(1)
    a = rng.uniform(size=300)
    b = a - 0.02 + rng.normal(0, 0.05, size=300)
    diff = a - b
    half = stats.t.ppf(0.975, 299) * diff.std(ddof=1) / np.sqrt(300)
    text = tables.paired(
        {"per_task": a.tolist(), "metric": "accuracy", "method": "a"},
        {"per_task": b.tolist(), "metric": "accuracy", "method": "b"},
    )
    assert text == f"{100 * diff.mean():+.2f} ± {100 * half:.2f}"
    assert tables.paired({"metric": "accuracy"}, {"per_task": [1.0]}) is None
    with pytest.raises(ValueError, match="not on the same tasks"):
        tables.paired(
            {"per_task": [1.0, 0.0], "metric": "mse", "method": "a"},
            {"per_task": [1.0], "metric": "mse", "method": "b"},
        )


def test_cells_are_formatted_by_metric_and_the_best_of_a_column_is_bold(records):
    assert tables.figure({"metric": "accuracy", "mean": 0.8781, "ci95": 0.0064}) == "87.8 ± 0.6"
    assert tables.figure({"metric": "mse", "mean": 0.0348, "ci95": 0.0041}) == "0.035 ± 0.004"
    assert tables.figure({"metric": "mse", "mean": 0.0057}) == "0.0057"
    table = definitions.TABLES["sine_by_context"].render(records)
    row = next(line for line in table.splitlines() if line.startswith("| relVIABLE (tanh) |"))
    assert "**0.035 ± 0.004**" in row  # the lowest MSE at C = 5
    page = "<!-- results:sine_by_context -->\n<!-- /results -->\n"
    rendered = render.render_page(page, records, "docs/RESULTS.md")
    assert "Rerun: `python -m results.rerun sine_by_context` (about " in rendered
    assert "[sine](records.md#sine)" in rendered


def test_every_verdict_names_records_that_exist_and_the_glance_is_eight_rows(records):
    for table in (VERDICTS, GLANCE):
        text = table.render(records)
        assert text.count("\n") == len(table.rows) + 2
    assert len(GLANCE.rows) <= 8
    for line in VERDICTS.render(records).splitlines()[2:]:
        answer = line.rsplit("|", 2)[1].strip().strip("*")
        assert answer in tables.ANSWERS + tables.CLAIM_ANSWERS, line


def _record(method, mean, ci95, per_task=None, metric="accuracy"):
    found = {"method": method, "label": method, "metric": metric, "mean": mean, "ci95": ci95}
    return found if per_task is None else {**found, "per_task": per_task}


def test_every_method_a_page_pairs_is_a_row_of_its_grid_at_that_setting(records):
    """A paired figure's two methods are rows of the page's own table of that benchmark and
    setting, where the page has one: a pair must not cite a figure the page never shows."""
    every = render.tables()
    for page in render.PAGES:
        with open(os.path.join(store.REPO, page)) as f:
            names = [m.group("name") for m in render.MARK.finditer(f.read())]
        grids = [every[n] for n in names if isinstance(every[n], tables.Table)]
        for name in names:
            if not isinstance(every[name], tables.Paired):
                continue
            for benchmark, setting, a, b in every[name].present(records):
                shown = [
                    g for g in grids if g.benchmark == benchmark and setting in dict(g.columns)
                ]
                for method in (a, b) if shown else ():
                    assert any(method in g.rows for g in shown), (page, name, setting, method)


def test_a_comparisons_answer_is_computed_from_its_figures():
    rng = np.random.default_rng(3)
    base = rng.uniform(0.6, 0.9, size=400)
    better, level = base + 0.02, base + rng.normal(0, 0.05, size=400)
    for ours, expected in ((better, "helps"), (level, "no gain"), (base - 0.02, "hurts")):
        a = _record("a", float(ours.mean()), 0.01, ours.tolist())
        b = _record("b", float(base.mean()), 0.01, base.tolist())
        assert tables.answer(a, b) == expected
    # unpaired: the two CIs apart, or not; lower is better for an MSE
    assert (
        tables.answer(_record("a", 0.1, 0.01, metric="mse"), _record("b", 0.2, 0.01, metric="mse"))
        == "helps"
    )
    assert tables.answer(_record("a", 0.19, 0.02), _record("b", 0.2, 0.02)) == "no gain"


def test_a_figure_on_an_earlier_form_of_the_data_is_marked_and_pairs_only_with_its_form():
    """An earlier form of the data draws other test tasks from the same seed: a record
    measured on it (`data_form`) is marked, and its per-task figures never pair with
    another form's, so the answer falls back to the two CIs."""
    rng = np.random.default_rng(4)
    base = rng.uniform(0.6, 0.9, size=400)
    ours = base + 0.004 + rng.normal(0, 0.01, size=400)  # paired: helps; CIs: overlap
    a = _record("a", float(ours.mean()), 0.02, ours.tolist())
    b = _record("b", float(base.mean()), 0.02, base.tolist())
    old = {**b, "data_form": "pixels l2-normalised"}
    assert tables.answer(a, b) == "helps" and tables.paired(a, b) is not None
    assert tables.paired(a, old) is None and tables.answer(a, old) == "no gain"
    assert tables.paired({**a, "data_form": old["data_form"]}, old) is not None
    assert tables.figure(old) == tables.figure(b) + " †"
    keys = {("e", "s", "a"): {**a, "setting": "s"}, ("e", "s", "old"): {**old, "setting": "s"}}
    for r in keys.values():
        r.update(benchmark="e", command="c", commit="abc", date="d", machine="m")
    named = {"p": tables.Paired([("e", "s", "a", "old")])}
    page = render.render_page("<!-- results:p -->\n<!-- /results -->", keys, named=named)
    assert ", unpaired |" in page
    assert "† Trained and tested on an earlier form of the data: pixels l2-normalised." in page
    checked = {**keys["e", "s", "old"], "method": "m", "setting": "s", "data_form": ""}
    assert "data_form must be a non-empty str" in store.check(checked, "e/s/m.json")[0]


def test_a_figure_whose_training_had_a_setback_is_marked_and_the_setback_said_under_it():
    """A run whose loss jumped or which collapsed on the way keeps its best weights' figure,
    marked, with what happened written under the table; an empty setback is refused."""
    a = {**_record("a", 0.9, 0.01), "setting": "5way5shot", "label": "A"}
    b = {**_record("b", 0.8, 0.01), "setting": "5way5shot", "label": "B"}
    hurt = {**b, "setback": "its loss jumped at 3,200; the figure is its weights at 2,500"}
    assert tables.figure(hurt) == tables.figure(b) + " ‡"
    assert tables.figure({**hurt, "data_form": "pixels"}) == tables.figure(b) + " † ‡"
    keys = {("e", "5way5shot", "a"): a, ("e", "5way5shot", "b"): hurt}
    for r in keys.values():
        r.update(benchmark="e", command="c", commit="abc", date="d", machine="m")
    named = {"p": tables.Paired([("e", "5way5shot", "a", "b")])}
    page = render.render_page("<!-- results:p -->\n<!-- /results -->", keys, named=named)
    assert "80.0 ± 1.0 ‡ |" in page and "†" not in page
    assert (
        "\n‡ Its training had a setback on the way: B at 5-way 5-shot (its loss jumped at "
        "3,200; the figure is its weights at 2,500).\n" in page
    )
    clean = {k: v for k, v in hurt.items() if k != "setback"}
    unmarked = render.render_page(
        "<!-- results:p -->\n<!-- /results -->",
        {**keys, ("e", "5way5shot", "b"): clean},
        named=named,
    )
    assert "‡" not in unmarked
    checked = {**hurt, "benchmark": "e", "method": "m", "setting": "s", "setback": ""}
    assert "setback must be a non-empty str" in store.check(checked, "e/s/m.json")[0]


def test_a_long_cell_and_an_answer_outside_the_vocabulary_are_refused(records):
    long = Verdicts([Verdict("x" * 121, "s", paper="")])
    with pytest.raises(ValueError, match="a cell of 121 characters"):
        long.render(records)
    typed = Verdicts(
        [
            Verdict(
                "q",
                "s",
                ("sine", "C5_K10_seed0", "cavia"),
                ("sine", "C5_K10_seed0", "cavia"),
                claim="yes",
            )
        ]
    )
    with pytest.raises(ValueError, match="answer 'yes' not in"):
        typed.render(records)
    with pytest.raises(ValueError, match="not in"):
        Verdicts([Verdict("q", "s", claim="mostly")]).render(records)


def test_the_jax_peers_rate_is_shown_once_or_before_and_after_a_suites_run():
    assert tables.peer_rate(3301) == "3,301"
    assert tables.peer_rate([2714, 3646]) == "2,714 before, 3,646 after"
    assert tables.peer_rate(None) == "not measured"


def test_the_index_lists_every_record_with_its_command(records):
    index = render.index_page(records)
    for record in records.values():
        assert record["_path"].split("records/", 1)[1] in index
    assert "`viable-train --gin_file=sine/cavia.gin --gin_param=CONTEXT_DIM=1" in index


def test_every_record_is_stored_as_lab_records_writes_it():
    """One format for every record file: what lab.records writes for its fields (a field a
    line, the per-task figures on one line, one final newline), so that a record written
    again by the tool differs from the old one only where a figure or a field does."""
    from lab.records import dumps

    differ = []
    for path in sorted(glob.glob(os.path.join(store.RECORDS, "**", "*.json"), recursive=True)):
        with open(path) as f:
            text = f.read()
        if dumps(json.loads(text)) != text:
            differ.append(os.path.relpath(path, store.REPO))
    assert not differ, differ


def test_the_results_page_stays_one_page_of_results_and_verdicts():
    """docs/RESULTS.md holds the tables and the verdicts; readings of them are research
    records (docs/lab/results_reading.md), paired detail is comparisons.md."""
    with open(os.path.join(store.REPO, "docs", "RESULTS.md")) as f:
        assert f.read().count("\n") <= 250


def test_a_cells_rerun_cost_is_estimated_from_runs_in_its_own_precision():
    timed32 = {"config": "c.gin", "updates": 100, "wall_clock_seconds": 10.0}
    timed16 = {**timed32, "precision": "bfloat16", "wall_clock_seconds": 50.0}
    untimed = {"config": "c.gin", "updates": 200}
    assert render.cost([untimed], [timed16]) == (0.0, 1)
    assert render.cost([untimed], [timed16, timed32]) == (20.0, 0)
    assert render.cost([{**untimed, "precision": "bfloat16"}], [timed16, timed32]) == (100.0, 0)


def test_the_best_viable_row_names_the_best_viable_record_of_each_setting(records):
    """'The best VIABLE' is a claim on the records: at each setting its row shows the VIABLE
    record (a method key naming viable) with the highest mean, chosen when the page is
    rendered, so that a record trained again, higher or lower, moves the row with it."""
    rows = [row for row in VERDICTS.rows if row.question == BEST_VIABLE]
    assert len(rows) == 3
    for row in rows:
        benchmark, setting = row.ours.benchmark, row.ours.setting
        viable = {
            key: record["mean"]
            for key, record in records.items()
            if key[:2] == (benchmark, setting) and "viable" in key[2]
        }
        best = max(viable, key=viable.get)
        ours, base = Verdicts.sides(row, records)
        assert (ours, base) == (best, (benchmark, setting, "protonet"))
        shown = Verdicts.row_cells(row, records)[2]
        assert shown.startswith(records[best]["label"] + " "), shown
        # Another VIABLE trained again above it: the row follows; below it: the row stays.
        other = next(k for k in viable if k != best)
        for mean, expected in ((viable[best] + 0.01, other), (viable[best] - 0.01, best)):
            again = {**records, other: {**records[other], "mean": mean}}
            assert Verdicts.sides(row, again)[0] == expected
    with pytest.raises(ValueError, match="no record of a method naming 'viable'"):
        tables.Best("omniglot_images", "5way1shot", "viable").key({})
    lowest = tables.Best("b", "s", "x").key(
        {("b", "s", m): {"metric": "mse", "mean": v} for m, v in (("x1", 0.2), ("x2", 0.1))}
    )
    assert lowest == ("b", "s", "x2")  # for an error, the best is the lowest
