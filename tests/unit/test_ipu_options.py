"""The option check PopART and PopTorch share (``backends.ipu.options``): ``available_memory_proportion``
as one per-IPU table, and one line naming the value, where it came from and what to use when it is bad."""

from __future__ import annotations

import re

import numpy as np
import pytest

from pytest_ipu.backends.ipu.options import MEMORY_PROPORTION_FIX
from pytest_ipu.backends.ipu.options import memory_proportions
from pytest_ipu.backends.ipu.options import plain_memory_proportion
from pytest_ipu.errors import CompileError


def check(value: object, ipus: int = 2) -> dict[int, float] | None:
    return memory_proportions(value, ipus, "popart option", "Net")


def test_unset_is_the_sdks_default():
    assert check(None) is None


def test_a_number_applies_to_every_ipu_of_the_model():
    assert check(0.3) == {0: 0.3, 1: 0.3}
    assert check(1) == {0: 1.0, 1: 1.0}
    assert check(np.float32(0.5)) == {0: 0.5, 1: 0.5}


def test_a_mapping_names_some_ipus_and_the_others_keep_the_default():
    assert check({"IPU1": 0.25}) == {1: 0.25}
    assert check({"IPU0": 0.3, "IPU1": 0.6}) == {0: 0.3, 1: 0.6}
    assert check({}) == {}


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        (-0.5, ""),
        (0, ""),
        (1.5, ""),
        (float("nan"), ""),
        (float("inf"), ""),
        ("0.3", ""),
        (True, ""),
        ([0.3], ""),
        ({"IPU0": -0.1}, ": 'IPU0' maps to -0.1, not a number in (0, 1]"),
        ({"IPU0": 2}, ": 'IPU0' maps to 2, not a number in (0, 1]"),
        ({"IPU0": "0.3"}, ": 'IPU0' maps to '0.3', not a number in (0, 1]"),
        ({"ipu0": 0.3}, ": key 'ipu0' names no IPU of the model (ipus=2: 'IPU0' ... 'IPU1')"),
        ({"IPU2": 0.3}, ": key 'IPU2' names no IPU of the model (ipus=2: 'IPU0' ... 'IPU1')"),
        ({0: 0.3}, ": key 0 names no IPU of the model (ipus=2: 'IPU0' ... 'IPU1')"),
        ({"IPU-1": 0.3}, ": key 'IPU-1' names no IPU of the model (ipus=2: 'IPU0' ... 'IPU1')"),
    ],
    ids=repr,
)
def test_a_bad_value_is_one_line_naming_value_source_and_fix(value, detail):
    with pytest.raises(CompileError) as exc:
        check(value)
    message = str(exc.value)
    assert (
        message
        == f"popart option available_memory_proportion={value!r} for Net{detail}; {MEMORY_PROPORTION_FIX}"
    )
    assert "\n" not in message


def test_the_fix_says_what_to_use():
    assert re.search(r"a number in \(0, 1\].*a mapping.*'IPU0'.*None", MEMORY_PROPORTION_FIX)


def test_records_get_plain_json():
    assert plain_memory_proportion(None) is None
    assert plain_memory_proportion(0.3) == 0.3
    assert plain_memory_proportion({"IPU0": np.float32(0.5)}) == {"IPU0": 0.5}
