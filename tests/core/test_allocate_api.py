"""`allocate` as a user reaches it: importable from the core package, messages naming its argument."""

from __future__ import annotations

import re

import pytest


def test_allocate_is_importable_from_the_core_package():
    import coba_verl
    from coba_verl.core import allocate

    assert allocate is coba_verl.allocate
    assert allocate([0.0, 0.5], total_budget=8).sum() == 8


@pytest.mark.parametrize(
    ("pass_rates", "message"),
    [
        (["abc"], "pass_rates[0]='abc' is not a number"),
        ([0.5, "x", 0.2], "pass_rates[1]='x' is not a number"),
        ("abc", "pass_rates='abc' is not a number"),
    ],
)
def test_non_numeric_pass_rates_are_refused_naming_the_argument(pass_rates, message):
    from coba_verl.core import allocate

    with pytest.raises(TypeError, match=re.escape(message)):
        allocate(pass_rates, total_budget=8)
