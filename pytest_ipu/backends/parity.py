"""Do a backend's outputs match the reference (torch eager, fp32, CPU) closely enough? (numpy only)

The error measure is scale-free: ``max_rel`` is the largest absolute difference divided by the
largest absolute reference value of that output, so it does not blow up where a reference value
happens to be near zero. The tolerance depends on the precision the backend ran in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pytest_ipu.backports import zip_strict
from pytest_ipu.results.records import ParityRecord

#: Largest allowed ``max_rel`` per precision. fp32 allows for reordered reductions and TF32 on GPUs;
#: fp16 and bf16 for their 11 and 8 bits of mantissa accumulated through a deep network.
TOLERANCES: Mapping[str, float] = {"fp32": 1e-3, "fp16": 1e-2, "bf16": 5e-2}


class ParityError(AssertionError):
    """A backend's outputs differ from the reference by more than the precision's tolerance."""


def to_arrays(outputs: Any) -> list[np.ndarray]:
    """Flatten a model's outputs (tensor, array, or nested tuple/list/dict of them) to float64 arrays."""
    if isinstance(outputs, dict):
        return [a for key in sorted(outputs) for a in to_arrays(outputs[key])]
    if isinstance(outputs, (list, tuple)):
        return [a for item in outputs for a in to_arrays(item)]
    if hasattr(outputs, "copy_outputs_to_cpu"):  # an onnxruntime IO binding, outputs on a device
        return to_arrays(outputs.copy_outputs_to_cpu())
    if hasattr(outputs, "detach"):  # a torch tensor, possibly on a device or in bf16
        outputs = outputs.detach().float().cpu().numpy()
    return [np.asarray(outputs, dtype=np.float64)]


def compare(reference: Any, actual: Any, precision: str, reference_name: str) -> ParityRecord:
    """Compare outputs (the record's ``passed`` says whether they match within the precision's
    tolerance); raises ``ParityError`` when their structure or shapes differ, or when either side
    has a NaN or an infinity (no error measure means anything then: the message says which side)."""
    ref, out = to_arrays(reference), to_arrays(actual)
    if len(ref) != len(out):
        raise ParityError(f"the model returned {len(out)} output(s), the reference {len(ref)}")
    max_abs = max_rel = 0.0
    for i, (r, a) in enumerate(zip_strict(ref, out)):
        if r.shape != a.shape:
            raise ParityError(f"output {i} has shape {a.shape}, the reference {r.shape}")
        if not (np.all(np.isfinite(a)) and np.all(np.isfinite(r))):
            # A non-finite value on either side makes the outputs incomparable: fail, never pass,
            # and say which side and what, not an "inf > tolerance" that reads as a big error.
            raise ParityError(_non_finite(i, r, a, precision, reference_name))
        diff = float(np.max(np.abs(a - r))) if r.size else 0.0
        scale = float(np.max(np.abs(r))) if r.size else 0.0
        max_abs = max(max_abs, diff)
        max_rel = max(max_rel, diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf")))
    return ParityRecord(reference_name, max_abs, max_rel, TOLERANCES[precision])


def _what(values: np.ndarray) -> str:
    """``NaN``, ``inf`` or ``NaN and inf``: what the non-finite values of one side are."""
    kinds = [kind for kind, test in (("NaN", np.isnan), ("inf", np.isinf)) if np.any(test(values))]
    return " and ".join(kinds)


def _non_finite(index: int, reference: np.ndarray, actual: np.ndarray, precision: str, name: str) -> str:
    """One line for output ``index`` where the model's or the reference's values are not finite:
    which side, what (NaN, inf), how many and the first place."""
    bad_ref, bad_out = ~np.isfinite(reference), ~np.isfinite(actual)
    first = tuple(int(x) for x in np.argwhere(bad_ref | bad_out)[0])
    model = f"the {precision} model's"
    ref = f"the reference's ({name})"
    if np.any(bad_ref) and np.any(bad_out):
        what = _what(actual) if _what(actual) == _what(reference) else "non-finite"
        return (
            f"output {index}: both outputs are {what} ({model} at {int(bad_out.sum())} of {actual.size} "
            f"values, {ref} at {int(bad_ref.sum())}; first at index {first}): nothing to compare; the "
            "model or its example inputs produce them (uninitialised weights or inputs?)"
        )
    if np.any(bad_out):
        return (
            f"output {index}: only {model} output is {_what(actual)} (at {int(bad_out.sum())} of "
            f"{actual.size} values; first at index {first}, where {ref} is {float(reference[first]):g}): "
            "the model overflows or divides by zero in this precision"
        )
    return (
        f"output {index}: only {ref} output is {_what(reference)} (at {int(bad_ref.sum())} of "
        f"{reference.size} values; first at index {first}, where {model} is {float(actual[first]):g}): "
        "the example inputs make the fp32 reference overflow; use smaller or normalised inputs"
    )
