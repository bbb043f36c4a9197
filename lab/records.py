"""A finished run as a results record: results/records/<benchmark>/<setting>/<method>.json.

    python -m lab.records RUN_DIR --benchmark sine --setting C5_K10_seed0 --method cavia \
        --label CAVIA --command "viable-train ..." --commit abc1234 [--num_support K] \
        [--machine "AMD EPYC, 2 cores"] [--date 2026-11-27]

    python -m lab.records RUN_DIR --benchmark omniglot_images --setting 20way1shot \
        --method cavia --commit abc1234 --again "for pairs with MeTAL on CAVIA"

Reads the run's results.json (or viable-eval's eval_k<K>.json with --num_support) and its
per-task figures, so that a paired comparison can be computed from the record alone.
With --again WHY the run trained a cell again on today's form of its data: the record it
replaces gives the label, command and config, and `detail` says why and what that earlier
run measured (a writer may add how the run was carried or paused).
Where the run's training loss jumped (lab/e2e_status.py's rule) after the weights its
figure is from, the record says so in `setback` (results/records.py), which a writer may
word better but not leave out. The date defaults to today, the machine to this machine's
CPU model and core count.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os

from results.tables import figure
from viable_tf.run_dir import RunDir

RECORDS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results", "records"
)


def this_machine() -> str:
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


def _spans(steps: list[int], spacing: int) -> str:
    """'at 1,900 and from 2,700 to 3,000': consecutive summary points as one span."""
    spans: list[list[int]] = []
    for step in steps:
        if spans and step - spans[-1][-1] <= spacing:
            spans[-1].append(step)
        else:
            spans.append([step])
    texts = [f"at {s[0]:,}" if len(s) == 1 else f"from {s[0]:,} to {s[-1]:,}" for s in spans]
    return texts[0] if len(texts) == 1 else ", ".join(texts[:-1]) + " and " + texts[-1]


def setback(run_dir: str, best_at: int, updates: int) -> str | None:
    """A record's `setback` where the run's training loss jumped after its best weights,
    the ones its figure is from (the run never passing them again); None where it did not
    or where the run keeps no training summaries."""
    from lab.e2e_status import jumps, scalar_curve

    curve = scalar_curve(run_dir, "train/meta_loss")
    after = [step for step in jumps(curve) if step > best_at]
    if not after:
        return None
    spacing = min(b - a for (a, _), (b, _) in itertools.pairwise(curve))
    return (
        f"its training loss jumped {_spans(after, spacing)} updates, after its best "
        f"weights, and it ended at {updates:,}; the figure is its weights "
        f"at {best_at:,}"
    )


def record_of(run_dir: str, *, num_support: int | None = None, **fields) -> dict:
    """The record of a finished run: its test figures, updates and wall-clock, and
    `fields` (benchmark, setting, method, label, command, commit, date, machine)."""
    run = RunDir(run_dir)
    path = run.results if num_support is None else run.evaluation(num_support)
    with open(path) as f:
        result = json.load(f)
    with open(run.per_task(num_support)) as f:
        per_task = json.load(f)["per_task"]
    record = {
        **fields,
        "metric": result["metric"],
        "mean": result["mean"],
        "ci95": result["ci95"],
        "num_tasks": result["num_tasks"],
        "updates": result["steps_trained"],
        "best_at": result["checkpoint_step"],
        "per_task": per_task,
    }
    if num_support is None and "train_wall_clock_seconds" in result:
        record["wall_clock_seconds"] = result["train_wall_clock_seconds"]
    found = setback(run_dir, record["best_at"], record["updates"])
    if found:
        record["setback"] = found
    return record


#: A record's leading fields, in the order the records keep them.
HEAD = (
    *("benchmark", "setting", "method", "label", "command", "config", "commit", "machine"),
    *("detail", "setback", "date"),
)


def trained_again(record: dict, earlier: dict, why: str) -> dict:
    """`record`, of a run that trained `earlier`'s cell again on today's form of its data,
    with `earlier`'s label, command and config where `record` has none, and a `detail`
    naming `why` and what the earlier run measured (on the form its `data_form` names)."""
    if "data_form" not in earlier:
        raise ValueError(f"{earlier['method']} at {earlier['setting']}: already on today's form")
    measured = figure({k: v for k, v in earlier.items() if k not in ("data_form", "setback")})
    form = earlier["data_form"].split(",")[0]  # its first words: 'l2-normalised pixels'
    detail = (
        f"trained again on today's form of the data, {why}: the earlier-form run (commit "
        f"{earlier['commit']}, {earlier['date']}, {earlier['machine']}, {form}) measured "
        f"{measured} at {earlier['updates']:,} updates, best at {earlier['best_at']:,}"
    )
    kept = {k: earlier[k] for k in ("label", "command", "config") if k in earlier}
    fields = {**kept, **record, "detail": detail}  # a label or command given wins
    head = {k: fields[k] for k in HEAD if k in fields}
    return {**head, **{k: v for k, v in fields.items() if k not in head}}


def dumps(record: dict) -> str:
    """A record as JSON, one field a line and its per-task figures on one line."""
    fields = {k: v for k, v in record.items() if k != "per_task"}
    text = json.dumps(fields, indent=1)
    if "per_task" in record:
        text = text[:-2] + ',\n "per_task": ' + json.dumps(record["per_task"]) + "\n}"
    return text + "\n"


def path_of(benchmark: str, setting: str, method: str, root: str = RECORDS) -> str:
    """Where the record of (benchmark, setting, method) is stored."""
    return os.path.join(root, benchmark, setting, method + ".json")


def write(record: dict, root: str = RECORDS) -> str:
    path = path_of(record["benchmark"], record["setting"], record["method"], root)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(dumps(record))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir")
    for name in ("benchmark", "setting", "method", "commit"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--label", help="required unless --again")
    parser.add_argument("--command", help="required unless --again")
    parser.add_argument("--again", metavar="WHY", help="the cell trained again on today's form")
    parser.add_argument("--num_support", type=int, default=None)
    parser.add_argument("--machine", default=this_machine())
    parser.add_argument("--date", default=datetime.date.today().isoformat())
    args = vars(parser.parse_args())
    run_dir, num_support, why = args.pop("run_dir"), args.pop("num_support"), args.pop("again")
    if why is None:
        missing = [f"--{k}" for k in ("label", "command") if args[k] is None]
        if missing:
            parser.error(f"{' and '.join(missing)} required (or --again WHY)")
        print(write(record_of(run_dir, num_support=num_support, **args)))
        return
    key = (args["benchmark"], args["setting"], args["method"])
    path = path_of(*key)
    if not os.path.exists(path):
        parser.error(f"--again: no record {'/'.join(key)} to train again")
    with open(path) as f:
        earlier = json.load(f)
    if "data_form" not in earlier:  # before the run is read
        parser.error(f"--again: {'/'.join(key)} is on today's form already, not an earlier one")
    fields = {k: v for k, v in args.items() if v is not None}
    print(write(trained_again(record_of(run_dir, num_support=num_support, **fields), earlier, why)))


if __name__ == "__main__":
    main()
