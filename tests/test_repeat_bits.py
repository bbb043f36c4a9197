"""lab/repeat_bits.py: it finds the calls whose outputs differ in any bit from the
first call's, names the outputs, and its two programs run (their answer on a given
machine is a measurement, in docs, not a test)."""

import numpy as np
import pytest

from lab.repeat_bits import (
    config_meta_gradient,
    first_differences,
    main,
    plain_meta_gradient,
    row,
)


def test_a_repeating_function_has_no_differences():
    value = [np.float32(1.5), np.arange(3, dtype=np.float32)]
    assert first_differences(lambda: value, ["a", "b"], calls=5) == []


def test_the_calls_that_differ_are_found_with_their_outputs():
    calls = iter(range(10))

    def drifting():  # b changes in its last bit from the fourth call (index 3) on
        k = next(calls)
        b = np.float32(1.0) if k < 3 else np.nextafter(np.float32(1.0), np.float32(2.0))
        return [np.float32(7.0), np.float32(2.0) * b]

    found = first_differences(drifting, ["a", "b"], calls=6)
    assert [call for call, _, _ in found] == [3, 4, 5]
    assert all(names == ["b"] for _, names, _ in found)
    assert found[0][2] == pytest.approx(2.0**-23)  # one ulp of 1, relative to |2|
    assert row("x", 6, found).startswith("| x | 6 | 3 | 3 | 1 outputs (first: b)")
    assert row("x", 6, []) == "| x | 6 | 0 | | |"


def test_an_output_that_was_zero_counts_its_new_size():
    calls = iter(range(3))
    found = first_differences(lambda: [np.float32(next(calls) * 0.5)], ["z"], calls=3)
    assert [(call, names, size) for call, names, size in found] == [
        (1, ["z"], 0.5),
        (2, ["z"], 1.0),
    ]


def test_the_plain_program_is_a_second_order_meta_gradient():
    fn, names = plain_meta_gradient(images=4, pool="avg")
    outputs = fn()
    assert len(outputs) == len(names) == 1 + 4 * 3 + 1
    assert all(np.all(np.isfinite(np.asarray(t))) for t in outputs)
    # The context's FiLM weights get a gradient only through the inner step (the context
    # starts at zero, where its scale and shift are zero): not zero, so the step is in it.
    assert np.any(np.asarray(outputs[names.index("film0/kernel")]) != 0)
    fn, names = plain_meta_gradient(images=4, pool="max", layers=1, shift_only=True)
    outputs = dict(zip(names, fn(), strict=True))
    assert len(outputs) == 1 + 3 + 1
    # Shifts alone: the scale half of the FiLM weights gets no gradient.
    assert np.all(np.asarray(outputs["film0/kernel"])[:, :32] == 0)
    assert np.any(np.asarray(outputs["film0/kernel"])[:, 32:] != 0)


def test_a_configuration_meta_gradient_is_named_by_its_variables():
    fn, names = config_meta_gradient("gin/sine/cavia.gin", [])
    outputs = fn()
    assert names[0] == "meta-loss" and len(outputs) == len(names) > 2
    assert np.shape(outputs[0]) == ()
    assert all(np.any(np.asarray(g) != 0) for g in outputs[1:])  # every weight reached
    compiled, _ = config_meta_gradient("gin/sine/cavia.gin", [], jit_compile=True)
    # The same quantities through XLA (how close two float paths come is
    # test_networks.py's float_sensitive claim, not this probe's).
    assert [np.shape(t) for t in compiled()] == [np.shape(t) for t in outputs]


@pytest.mark.parametrize(
    "argv, line",
    [
        (["plain", "--calls", "1"], "--calls must be at least 2, got 1"),
        (["plain", "--layers", "0"], "--layers must be at least 1, got 0"),
        (["plain", "--images", "0"], "--images must be at least 1, got 0"),
    ],
)
def test_bad_counts_stop_with_one_line(argv, line, capsys):
    with pytest.raises(SystemExit):
        main(argv)
    assert line in capsys.readouterr().err
