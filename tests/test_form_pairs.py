"""lab/form_pairs.py: which pairs join two forms of the data, and which records must be
trained again together so that none that pairs today stops pairing."""

import itertools

from lab.form_pairs import across, closure, pairs
from results import records as store
from results.render import tables
from results.tables import Paired, Verdict, Verdicts

OLD = "an earlier form"


def _key(method, setting="s"):
    return ("b", setting, method)


def _records(**forms):
    return {_key(m): ({"data_form": f} if f else {}) for m, f in forms.items()}


def test_a_chain_of_earlier_form_pairs_moves_together_and_stops_at_todays_form():
    # a-b and b-c pair on the earlier form; c-d is across already (d on today's form);
    # e pairs with nothing named; a verdict names a-b again.
    records = _records(a=OLD, b=OLD, c=OLD, d=None, e=OLD)
    named = {
        "grid": Paired([("b", "s", "a", "b"), ("b", "s", "b", "c"), ("b", "s", "c", "d")]),
        "verdicts": Verdicts([Verdict("q?", "s", _key("a"), _key("b")), Verdict("r?", "s")]),
        "missing": Paired([("b", "s", "a", "z")], sparse=True),
    }
    every = pairs(named, records)
    assert len(every) == 5  # the verdict without figures names no pair
    assert [(a[2], b[2]) for a, b, _ in across(every, records)] == [("c", "d")]
    assert closure(every, records, {_key("a")}) == {_key("a"), _key("b"), _key("c")}
    # Trained again together, a, b and c pair with d and with each other.
    assert across(every, records, {_key(m) for m in "abc"}) == []
    # d is on today's form already: it takes nothing along.
    assert closure(every, records, {_key("d")}) == {_key("d")}


def test_the_closure_of_any_image_record_breaks_no_pair_of_todays_pages():
    records = store.load()
    every = pairs(tables(), records)
    before = set(across(every, records))
    images = sorted(k for k in records if k[0] == "omniglot_images")
    for key in itertools.islice(images, 0, None, 5):
        whole = closure(every, records, {key})
        assert key in whole
        assert set(across(every, records, whole)) <= before
