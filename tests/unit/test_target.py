"""Targets (pytest_ipu.backends.target) and the typo hints of the marker and the backend registry."""

from __future__ import annotations

import pytest

from pytest_ipu import backends
from pytest_ipu.backends.target import Target
from pytest_ipu.backends.target import parse_target
from pytest_ipu.pytest_plugin import marker_keywords as marker


@pytest.mark.parametrize(
    ("text", "target", "shown", "test_id"),
    [
        ("torch", Target("torch"), "torch", "torch"),
        ("torch:cpu", Target("torch", "cpu"), "torch:cpu", "torch-cpu"),
        ("torch:cuda:0", Target("torch", "cuda:0"), "torch:cuda:0", "torch-cuda0"),
        (" torch:cuda:12 ", Target("torch", "cuda:12"), "torch:cuda:12", "torch-cuda12"),
        ("torch-compile:cuda", Target("torch-compile", "cuda"), "torch-compile:cuda", "torch-compile-cuda"),
        ("my_backend.v2", Target("my_backend.v2"), "my_backend.v2", "my_backend.v2"),
        ("popart:ipu-model", Target("popart", "ipu-model"), "popart:ipu-model", "popart-ipu-model"),
    ],
)
def test_parse_target(text, target, shown, test_id):
    got = parse_target(text)
    assert got == target
    assert str(got) == shown
    assert got.id == test_id
    assert ":" not in got.id
    assert parse_target(str(got)) == got


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Torch",
        ":cpu",
        "torch:CPU",
        "torch:cuda:",
        "torch:cuda:0:1",
        "torch:0",
        "1torch",
        "torch cpu",
        "popart:-ipu",
    ],
)
def test_parse_target_rejects(text):
    with pytest.raises(ValueError, match=r"expected a backend target such as 'torch', 'torch:cpu'") as info:
        parse_target(text)
    assert repr(text) in str(info.value)


def test_parse_target_rejects_empty_device():
    with pytest.raises(ValueError, match="expected a backend target"):
        parse_target("torch:")


def test_targets_are_hashable_and_equal_by_value():
    assert len({Target("torch", "cpu"), parse_target("torch:cpu")}) == 1
    assert Target("torch", "cuda") != Target("torch", "cpu")


def test_session_sorts_targets_with_and_without_device_by_their_text():
    targets = [Target("torch", "cpu"), Target("torch")]
    assert sorted(targets, key=str) == [Target("torch"), Target("torch", "cpu")]


# -- marker keyword hints -------------------------------------------------------------------------

ALLOWED = (
    "backend, precision, rounds, warmup_rounds, min_rounds, max_time, max_time_cap, repeats, "
    "call_timeout, repeat_mode, power, ipus, replicas, stages, instances, gate"
)


def test_unknown_keyword_suggests_close_match():
    assert marker.unknown_keyword_message("round") == (
        f"@pytest.mark.ipu got unknown keyword 'round' (did you mean 'rounds'?); allowed: {ALLOWED}"
    )


@pytest.mark.parametrize(("typo", "meant"), [("warmup", "warmup_rounds"), ("max_tme", "max_time")])
def test_unknown_keyword_other_typos(typo, meant):
    assert f"(did you mean {meant!r}?)" in marker.unknown_keyword_message(typo)


def test_unknown_keyword_without_close_match():
    message = marker.unknown_keyword_message("zzz")
    assert message == f"@pytest.mark.ipu got unknown keyword 'zzz'; allowed: {ALLOWED}"
    assert "did you mean" not in message


def test_marker_keywords_map_to_settings_fields():
    assert list(marker.KEYWORDS) == [k.strip() for k in ALLOWED.split(",")]
    assert marker.KEYWORDS["max_time"].field == "max_time_s"
    assert marker.KEYWORDS["backend"].field == "targets"
    assert marker.KEYWORDS["max_time"].parse("250ms") == pytest.approx(0.25)
    assert marker.KEYWORDS["repeats"].parse("4") == 4
    assert marker.KEYWORDS["max_time_cap"].field == "time_cap"
    assert str(marker.KEYWORDS["max_time_cap"].parse("60s")) == "60s"


# -- backend registry hints -----------------------------------------------------------------------


def test_unknown_backend_suggests_torch():
    reason = backends.unknown_backend_reason(Target("troch", "cpu"))
    assert reason == (
        f"unknown backend 'troch' (did you mean 'torch'?); built in: {', '.join(backends.BUILTIN)} "
        "(a conftest can add others with the pytest_ipu_make_backend hook)"
    )


def test_unknown_backend_suggests_onnxruntime():
    reason = backends.unknown_backend_reason(Target("onnxruntim", "cpu"))
    assert reason.startswith("unknown backend 'onnxruntim' (did you mean 'onnxruntime'?); built in: ")


def test_unknown_backend_without_close_match():
    reason = backends.unknown_backend_reason(Target("zzz"))
    assert reason.startswith("unknown backend 'zzz'; built in: ")
    assert "did you mean" not in reason


def test_registry_candidates():
    entries = backends.BUILTIN.items()
    auto = [Target(name, device) for name, entry in entries if entry.auto for device in entry.devices]
    opt_in = [Target(name, device) for name, entry in entries if not entry.auto for device in entry.devices]
    assert backends.auto_candidates() == auto
    assert backends.all_candidates() == auto + opt_in  # auto ones first, each group in registry order
    assert backends.make_backend(Target("nope")) is None


def test_registry_has_torch_onnxruntime_and_ipus_by_default_and_the_slow_compilers_opt_in():
    assert backends.auto_candidates()[:2] == [Target("torch", "cpu"), Target("torch", "cuda")]
    assert {str(t) for t in backends.auto_candidates()} == {
        "torch:cpu",
        "torch:cuda",
        "onnxruntime:cpu",
        "onnxruntime:cuda",
        "poptorch:ipu",
        "popart:ipu",
    }
    opt_in = set(backends.all_candidates()) - set(backends.auto_candidates())
    assert {str(t) for t in opt_in} == {"torch-compile:cpu", "torch-compile:cuda", "onnxruntime-trt:cuda"}


def test_make_backend_passes_the_cache_dir_to_backends_that_export(tmp_path):
    """Constructing a backend imports no runtime: onnxruntime is imported by availability() and compile()."""
    ort = backends.make_backend(Target("onnxruntime", "cpu"), tmp_path)
    trt = backends.make_backend(Target("onnxruntime-trt", "cuda:1"), tmp_path)
    assert (ort.name, ort.device, ort.provider) == ("onnxruntime", "cpu", "CPUExecutionProvider")
    assert (trt.name, trt.device, trt.provider) == ("onnxruntime-trt", "cuda:1", "TensorrtExecutionProvider")
    assert ort._cache_dir == trt._cache_dir == tmp_path


@pytest.mark.parametrize(
    "text", ["torch", "torch:cpu", "torch:cuda", "torch:cuda:1", "poptorch:ipu:3", "popart:ipu-model"]
)
def test_builtin_targets_are_known(text):
    assert backends.unknown_target_reason(parse_target(text)) is None


@pytest.mark.parametrize(
    ("text", "start"),
    [
        ("troch", "unknown backend 'troch' (did you mean 'torch'?)"),
        (
            "torch:gpu",
            "unknown device 'gpu' for backend 'torch' (did you mean 'cuda'?); torch runs on cpu, cuda",
        ),
        (
            "onnxruntime-trt:cpu",
            "unknown device 'cpu' for backend 'onnxruntime-trt'; onnxruntime-trt runs on cuda",
        ),
        ("popart:ipu-modle", "unknown device 'ipu-modle' for backend 'popart' (did you mean 'ipu-model'?)"),
    ],
)
def test_unknown_targets_say_what_is_known(text, start):
    reason = backends.unknown_target_reason(parse_target(text))
    assert reason is not None
    assert reason.startswith(start)


def test_the_ipu_model_is_never_an_auto_candidate():
    assert all(t.device != "ipu-model" for t in backends.all_candidates())


@pytest.mark.parametrize(
    ("device", "kind"), [(None, None), ("cuda", "cuda"), ("cuda:1", "cuda"), ("ipu-model", "ipu-model")]
)
def test_device_kind_drops_the_index(device, kind):
    assert Target("x", device).device_kind == kind
