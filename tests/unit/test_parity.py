"""Output parity (pytest_ipu.backends.parity): the scale-free error measure, tolerances, structure
checks, flattening.

The arrays are built so that every difference is exact in binary floating point: the expected
``max_abs`` and ``max_rel`` are compared with ``==``, not approximately.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_ipu.backends.parity import TOLERANCES
from pytest_ipu.backends.parity import ParityError
from pytest_ipu.backends.parity import compare
from pytest_ipu.backends.parity import to_arrays
from pytest_ipu.results.records import ParityRecord

try:  # module level: torch must not be first imported after in-process pytester runs
    import torch
except ImportError:  # pragma: no cover - torch is a dev dependency
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")

REF = "torch eager fp32 on cpu"


def _a(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float64)


# -- the measure ------------------------------------------------------------------------------------


def test_equal_outputs_pass_with_zero_error():
    ref = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    parity = compare(ref, ref.copy(), "fp32", REF)
    assert parity == ParityRecord(REF, 0.0, 0.0, TOLERANCES["fp32"])
    assert parity.passed


def test_max_rel_is_the_max_abs_error_over_the_largest_reference_magnitude():
    ref = _a(0.0, -8.0, 2.0)
    actual = _a(0.0, -8.0, 2.0 + 2**-10)  # off by 2**-10 where the reference is 2; the scale is 8
    parity = compare(ref, actual, "fp32", REF)
    assert (parity.max_abs, parity.max_rel) == (2**-10, 2**-13)
    assert parity.passed  # 1.2e-4 <= 1e-3


@pytest.mark.parametrize(("precision", "passed"), [("fp32", False), ("fp16", True), ("bf16", True)])
def test_tolerance_depends_on_the_precision(precision, passed):
    parity = compare(_a(1.0, -8.0), _a(1.0 + 2**-6, -8.0), precision, REF)
    assert (parity.max_abs, parity.max_rel) == (2**-6, 2**-9)  # 1.95e-3: above fp32's 1e-3 only
    assert parity.tolerance == TOLERANCES[precision]
    assert parity.passed is passed


def test_tolerances_grow_as_precision_shrinks():
    assert TOLERANCES["fp32"] < TOLERANCES["fp16"] < TOLERANCES["bf16"]


def test_error_exactly_at_the_tolerance_passes():
    parity = ParityRecord(REF, 1.0, TOLERANCES["fp16"], TOLERANCES["fp16"])
    assert parity.passed
    assert not ParityRecord(REF, 1.0, float(np.nextafter(TOLERANCES["fp16"], 1.0)), TOLERANCES["fp16"]).passed


def test_worst_output_decides_and_each_output_has_its_own_scale():
    # Output 0: big error on a big scale (0.5 / 64). Output 1: smaller error on a small scale (0.25 / 1).
    ref = (_a(64.0, 1.0), _a(1.0, -0.5))
    actual = (_a(64.5, 1.0), _a(1.0, -0.25))
    parity = compare(ref, actual, "bf16", REF)
    assert (parity.max_abs, parity.max_rel) == (0.5, 0.25)
    assert not parity.passed


def test_as_json_is_the_stored_form():
    parity = compare(_a(1.0, -8.0), _a(1.0 + 2**-6, -8.0), "fp32", REF)
    assert parity.as_json() == {
        "reference": REF,
        "max_abs": 2**-6,
        "max_rel": 2**-9,
        "tolerance": 1e-3,
        "passed": False,
    }


# -- non-finite values and zero references ---------------------------------------------------------


@pytest.mark.parametrize(("bad", "what"), [(np.nan, "NaN"), (np.inf, "inf"), (-np.inf, "inf")])
def test_a_non_finite_model_output_fails_naming_the_side_and_the_value(bad, what):
    with pytest.raises(ParityError) as info:
        compare((_a(1.0, 2.0), _a(3.0)), (_a(1.0, bad), _a(3.0)), "bf16", REF)
    assert str(info.value).startswith(
        f"output 0: only the bf16 model's output is {what} (at 1 of 2 values; first at index (1,), "
        f"where the reference's ({REF}) is 2)"
    )
    assert "tolerance" not in str(info.value)


def test_both_outputs_nan_says_so_instead_of_an_infinite_error():
    with pytest.raises(ParityError, match=r"^output 1: both outputs are NaN \(the fp32 model's at 2 of 3"):
        compare((_a(1.0), _a(np.nan, 0.0, np.nan)), (_a(1.0), _a(np.nan, 0.0, np.nan)), "fp32", REF)


def test_a_nan_only_in_the_reference_blames_the_reference():
    with pytest.raises(
        ParityError, match=r"^output 0: only the reference's \(.*\) output is NaN .* model's is 5\)"
    ):
        compare(_a(np.nan), _a(5.0), "fp32", REF)


def test_a_non_finite_output_fails_even_when_the_reference_has_the_same_value():
    with pytest.raises(ParityError, match=r"^output 0: both outputs are inf "):
        compare(_a(1.0, np.inf), _a(1.0, np.inf), "fp32", REF)


def test_nan_on_one_side_and_inf_on_the_other_are_both_named_non_finite():
    with pytest.raises(ParityError, match=r"^output 0: both outputs are non-finite .* first at index \(0,\)"):
        compare(_a(1.0, np.inf), _a(np.nan, 2.0), "fp32", REF)


def test_an_infinite_reference_with_finite_outputs_fails():
    with pytest.raises(ParityError, match=r"only the reference's .* output is inf .*reference overflow"):
        compare(_a(1.0, np.inf), _a(1.0, 5.0), "fp32", REF)


def test_all_zero_reference_and_outputs_pass():
    parity = compare(np.zeros((2, 3)), np.zeros((2, 3)), "fp32", REF)
    assert (parity.max_abs, parity.max_rel, parity.passed) == (0.0, 0.0, True)


def test_all_zero_reference_with_any_difference_fails_without_dividing_by_zero():
    parity = compare(np.zeros(3), _a(0.0, 2**-20, 0.0), "bf16", REF)
    assert parity.max_abs == 2**-20
    assert parity.max_rel == math.inf  # no scale to relate the error to
    assert not parity.passed


def test_zero_reference_in_one_output_does_not_hide_another_outputs_error():
    parity = compare((np.zeros(2), _a(4.0)), (np.zeros(2), _a(4.5)), "bf16", REF)
    assert (parity.max_abs, parity.max_rel) == (0.5, 0.125)


def test_empty_outputs_compare_equal():
    parity = compare(np.zeros((0, 3)), np.zeros((0, 3)), "fp32", REF)
    assert (parity.max_abs, parity.max_rel, parity.passed) == (0.0, 0.0, True)


# -- structure ----------------------------------------------------------------------------------------


def test_nested_tuples_dicts_and_lists_are_flattened_dicts_by_sorted_key():
    a, b, c = _a(1.0), _a(2.0, 3.0), _a(4.0, 5.0, 6.0)
    assert [x.tolist() for x in to_arrays({"z": (a, [b]), "a": c})] == [c.tolist(), a.tolist(), b.tolist()]


def test_nested_reference_against_flat_outputs():
    """A torch model returning a dict of tuples against an ONNX session's flat list, in sorted-key order."""
    reference = {"logits": (_a(1.0, -8.0), _a(2.0)), "aux": _a(0.5)}
    actual = [_a(0.5), _a(1.0, -8.0 + 2**-6), _a(2.0)]
    parity = compare(reference, actual, "fp32", REF)
    assert (parity.max_abs, parity.max_rel) == (2**-6, 2**-9)


def test_a_different_number_of_outputs_raises():
    with pytest.raises(ParityError, match=r"^the model returned 1 output\(s\), the reference 2$"):
        compare((_a(1.0), _a(2.0)), [_a(1.0)], "fp32", REF)


def test_a_different_shape_raises_naming_the_output():
    with pytest.raises(ParityError, match=r"^output 1 has shape \(2, 3\), the reference \(3, 2\)$"):
        compare((_a(1.0), np.zeros((3, 2))), (_a(1.0), np.zeros((2, 3))), "fp32", REF)


def test_a_broadcastable_shape_is_still_a_mismatch():
    with pytest.raises(ParityError, match=r"output 0 has shape \(1, 3\), the reference \(3,\)"):
        compare(np.zeros(3), np.zeros((1, 3)), "fp32", REF)


def test_parity_error_is_an_assertion_error():
    assert issubclass(ParityError, AssertionError)  # a failed check fails the test, not errors it


# -- to_arrays ---------------------------------------------------------------------------------------


def test_to_arrays_makes_float64_arrays_of_arrays_lists_and_scalars():
    out = to_arrays([np.ones(2, dtype=np.float16), 3, np.array([1, 2], dtype=np.int64)])
    assert [x.dtype for x in out] == [np.float64] * 3
    assert [x.tolist() for x in out] == [[1.0, 1.0], 3.0, [1.0, 2.0]]


class _FakeBinding:
    """Imitates an onnxruntime IOBinding: outputs live on a device until copied to the CPU."""

    def __init__(self, outputs: list[np.ndarray]) -> None:
        self.outputs = outputs
        self.copies = 0

    def copy_outputs_to_cpu(self) -> list[np.ndarray]:
        self.copies += 1
        return self.outputs


def test_to_arrays_copies_io_binding_outputs_to_the_cpu():
    binding = _FakeBinding([np.array([1.5, 2.5], dtype=np.float16), np.zeros((2, 2), dtype=np.float32)])
    out = to_arrays(binding)
    assert binding.copies == 1
    assert [(x.shape, x.dtype) for x in out] == [((2,), np.float64), ((2, 2), np.float64)]
    assert out[0].tolist() == [1.5, 2.5]


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int64"])
def test_to_arrays_of_torch_tensors_in_every_dtype(dtype):
    tensor = torch.tensor([[1.0, -2.5], [0.5, 3.0]]).to(getattr(torch, dtype))
    (out,) = to_arrays(tensor)
    assert out.dtype == np.float64
    assert out.tolist() == tensor.double().tolist()  # every value here is exact in every dtype


@needs_torch
def test_to_arrays_detaches_tensors_that_require_grad():
    weight = torch.nn.Parameter(torch.ones(2, 2))
    (out,) = to_arrays(weight * 2)
    assert out.tolist() == [[2.0, 2.0], [2.0, 2.0]]


@needs_torch
def test_compare_torch_bf16_outputs_against_an_fp32_reference():
    torch.manual_seed(0)
    reference = torch.randn(4, 16)
    parity = compare(reference, reference.bfloat16(), "bf16", REF)
    assert 0 < parity.max_rel <= 2**-8  # bf16 keeps 8 significant bits: relative rounding <= 2**-9
    assert parity.passed
