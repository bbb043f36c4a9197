"""Which of the results pages' pairs join records measured on two forms of the data, and
which records must be trained again together so that the ones named pair on today's form.

    python -m lab.form_pairs                      # the pairs across two forms today
    python -m lab.form_pairs omniglot_images/5way5shot/maml omniglot_images/5way5shot/cavia

A pair (a `Paired` table's row, or a verdict's ours and base) is paired task by task only
where both records were measured on one form of the data (results/tables.py). A record
trained again reads today's form, so it leaves every partner still on an earlier form
unpaired. With records named, this prints the pairs they would join and those they would
break, then the smallest set holding them that breaks none (every partner of a paired
pair goes with it) and that set's cost at the recorded wall-clocks.
"""

from __future__ import annotations

import argparse

from results.records import Key, load
from results.render import cost, tables
from results.tables import Paired, Verdicts

Pair = tuple[Key, Key, str]  # (A, B, the table or verdict question naming them)


def pairs(named: dict, records: dict) -> set[Pair]:
    """Every pair of records the tables in `named` compare (a verdict's side that the
    records choose, `Best`, as they choose it today)."""
    found = set()
    for name, table in named.items():
        if isinstance(table, Paired):
            for bench, setting, a, b in table.rows:
                found.add(((bench, setting, a), (bench, setting, b), name))
        elif isinstance(table, Verdicts):
            for row in table.rows:
                ours, base = table.sides(row, records)
                if ours is not None and base is not None:
                    found.add((ours, base, f"{name}: {row.question}"))
    return found


def _form(records: dict, key: Key, retrained: set[Key]) -> str | None:
    return None if key in retrained else records[key].get("data_form")


def across(every: set[Pair], records: dict, retrained: set[Key] = frozenset()) -> list[Pair]:
    """The pairs, of records that exist, on two forms once `retrained` read today's."""
    return sorted(
        (a, b, where)
        for a, b, where in every
        if a in records
        and b in records
        and _form(records, a, retrained) != _form(records, b, retrained)
    )


def closure(every: set[Pair], records: dict, retrain: set[Key]) -> set[Key]:
    """`retrain` and every record it must take along so that no pair paired today
    turns across forms."""
    done, before = set(retrain), set(across(every, records))
    while True:
        broken = [p for p in across(every, records, done) if p not in before]
        more = {k for a, b, _ in broken for k in (a, b)} - done
        if not more:
            return done
        done |= more


def _name(key: Key) -> str:
    return "/".join(key)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("retrain", nargs="*", help="records as BENCHMARK/SETTING/METHOD")
    args = parser.parse_args()
    records = load()
    every = pairs(tables(), records)
    retrain = {tuple(name.split("/")) for name in args.retrain}
    unknown = sorted(_name(k) for k in retrain if k not in records)
    if unknown:
        parser.error(f"no record {', '.join(unknown)}")
    today = set(across(every, records))
    if not retrain:
        print(f"{len(today)} pairs across two forms of the data:")
        for a, b, where in sorted(today):
            print(f"  {_name(a)} against {_name(b)} ({where})")
        return
    after = set(across(every, records, retrain))
    for title, chosen in (("joins", today - after), ("breaks", after - today)):
        print(f"Training {len(retrain)} again {title} {len(chosen)} pairs:")
        for a, b, where in sorted(chosen):
            print(f"  {_name(a)} against {_name(b)} ({where})")
    whole = closure(every, records, retrain)
    seconds, unknown = cost([records[k] for k in whole], list(records.values()))
    print(
        f"Breaking none takes {len(whole)} records, about {seconds / 3600:.1f} h at their"
        f" recorded wall-clocks{f' ({unknown} not estimated)' if unknown else ''}:"
    )
    for key in sorted(whole):
        print(f"  {_name(key)}")


if __name__ == "__main__":
    main()
