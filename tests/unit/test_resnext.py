"""Unit tests for the random-weight ResNeXt-101 benchmark model."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from benchmarks.models.resnext import VARIANTS  # noqa: E402
from benchmarks.models.resnext import ResNeXt  # noqa: E402
from benchmarks.models.resnext import build  # noqa: E402
from benchmarks.models.resnext import resnext101_32x4d  # noqa: E402
from benchmarks.models.resnext import resnext101_32x8d  # noqa: E402


def _num_params(model: ResNeXt) -> int:
    return sum(p.numel() for p in model.parameters())


def test_parameter_counts_match_reference() -> None:
    assert _num_params(resnext101_32x4d()) == 44_177_704
    assert _num_params(resnext101_32x8d()) == 88_791_336


def test_forward_gives_finite_logits() -> None:
    model = resnext101_32x4d().eval()
    # 64x64 keeps the test fast while still reaching a 2x2 map in stage 4.
    x = torch.randn(1, 3, 64, 64)
    with torch.inference_mode():
        out = model(x)
    assert out.shape == (1, 1000)
    assert torch.isfinite(out).all()
    # Random weights must still produce informative, non-constant logits.
    assert out.std().item() > 0


def test_build_is_deterministic_per_seed() -> None:
    first = build("32x4d", seed=0).state_dict()
    same = build("32x4d", seed=0).state_dict()
    other = build("32x4d", seed=1).state_dict()
    assert first.keys() == same.keys() == other.keys()
    assert all(torch.equal(first[k], same[k]) for k in first)
    assert not all(torch.equal(first[k], other[k]) for k in first)


def test_build_returns_eval_mode() -> None:
    assert not build("32x4d").training


def test_build_rejects_unknown_variant() -> None:
    with pytest.raises(ValueError, match="32x16d") as excinfo:
        build("32x16d")
    message = str(excinfo.value)
    for name in VARIANTS:
        assert name in message
    assert "\n" not in message


def test_build_leaves_global_rng_untouched() -> None:
    torch.manual_seed(1234)
    before = torch.get_rng_state()
    build("32x4d", seed=7)
    assert torch.equal(torch.get_rng_state(), before)
