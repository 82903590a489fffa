"""The torch backend's thread counts (``--ipu-torch-threads``, ``--ipu-torch-interop-threads``).

They are process-wide torch settings: the in-process tests restore the intra-op count afterwards and
never change the inter-op count (torch allows that once per process), which a subprocess shows.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_ipu import backends
from pytest_ipu.backends import BUILTIN
from pytest_ipu.backends.target import Target
from pytest_ipu.backends.torch import TorchBackend
from pytest_ipu.errors import CompileError
from tests.unit.torch_versions import needs_catchable_interop_refusal

torch = pytest.importorskip("torch")

#: torch's own message when the inter-op count can no longer be set.
TORCH_REFUSAL = (
    "Error: cannot set number of interop threads after parallel work has started or "
    "set_num_interop_threads called"
)


@pytest.fixture(autouse=True)
def _restore_intra_op_threads() -> Iterator[None]:
    """Other tests in this process must see torch's thread count as it was."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _compile(backend: TorchBackend) -> object:
    x = torch.randn(2, 8)
    return backend.compile(torch.nn.Linear(8, 4), (x,), "fp32", {})


def test_requested_intra_op_threads_are_applied_and_recorded() -> None:
    compiled = _compile(TorchBackend(device="cpu", intra_op_threads=1))
    assert torch.get_num_threads() == 1
    assert compiled.info["threads"] == {
        "intra_op": 1,
        "inter_op": torch.get_num_interop_threads(),
        "requested": {"intra_op": 1, "inter_op": "auto"},
    }
    x = torch.randn(2, 8)
    assert compiled.run(*compiled.prepare_inputs((x,))).shape == (2, 4)


def test_describe_shows_the_threads_in_effect_and_the_requested_ones() -> None:
    backend = TorchBackend(device="cpu", intra_op_threads=1)
    _compile(backend)
    info = backend.describe()
    assert (info["threads"], info["interop_threads"]) == (1, torch.get_num_interop_threads())
    assert info["threads_requested"] == {"intra_op": 1, "inter_op": "auto"}


def test_auto_leaves_torchs_defaults_and_still_records_them() -> None:
    before = (torch.get_num_threads(), torch.get_num_interop_threads())
    compiled = _compile(TorchBackend(device="cpu"))
    assert (torch.get_num_threads(), torch.get_num_interop_threads()) == before
    assert compiled.info["threads"] == {
        "intra_op": before[0],
        "inter_op": before[1],
        "requested": {"intra_op": "auto", "inter_op": "auto"},
    }
    assert TorchBackend(device="cpu").describe()["threads_requested"] == {
        "intra_op": "auto",
        "inter_op": "auto",
    }


def test_interop_threads_already_in_effect_are_not_set_again(monkeypatch: pytest.MonkeyPatch) -> None:
    current = torch.get_num_interop_threads()

    def refuse(n: int) -> None:
        raise AssertionError(f"set_num_interop_threads({n}) called for the count already in effect")

    monkeypatch.setattr(torch, "set_num_interop_threads", refuse)
    compiled = _compile(TorchBackend(device="cpu", inter_op_threads=current))
    assert compiled.info["threads"]["inter_op"] == current
    assert compiled.info["threads"]["requested"] == {"intra_op": "auto", "inter_op": current}


def test_interop_threads_that_can_no_longer_change_are_a_one_line_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    current = torch.get_num_interop_threads()

    def refuse(n: int) -> None:
        raise RuntimeError(TORCH_REFUSAL)

    monkeypatch.setattr(torch, "set_num_interop_threads", refuse)
    with pytest.raises(CompileError) as excinfo:
        _compile(TorchBackend(device="cpu", inter_op_threads=current + 1))
    message = str(excinfo.value)
    assert "\n" not in message
    assert message.startswith(f"--ipu-torch-interop-threads={current + 1} cannot be applied: ")
    assert f"already {current} in this process" in message
    assert "only once, before any inter-op parallel work starts" in message
    assert f"use --ipu-torch-interop-threads={current} or auto" in message


REAL_TORCH = """
import torch
from pytest_ipu.backends.torch import TorchBackend
from pytest_ipu.errors import CompileError

def compile(backend):
    return backend.compile(torch.nn.Linear(8, 4), (torch.zeros(1, 8),), "fp32", {})

# A fresh process: the first request is applied ...
print(compile(TorchBackend(inter_op_threads=1)).info["threads"]["inter_op"])
# ... asking again for the same count is fine ...
print(compile(TorchBackend(inter_op_threads=1)).info["threads"]["inter_op"])
# ... and another count is refused by torch, which the backend turns into its error.
try:
    compile(TorchBackend(inter_op_threads=3))
except CompileError as exc:
    print(exc)
"""


@needs_catchable_interop_refusal
def test_real_torch_refuses_a_second_interop_count_in_a_fresh_process(tmp_path: Path) -> None:
    """torch itself, in a subprocess (this process's inter-op pool must stay as it is)."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(REAL_TORCH)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    first, again, error = proc.stdout.splitlines()
    assert (first, again) == ("1", "1")
    assert error.startswith("--ipu-torch-interop-threads=3 cannot be applied: torch's inter-op threads are ")
    assert "already 1 in this process" in error


@pytest.mark.parametrize("value", [0, -1, True, 1.5])
def test_a_bad_thread_count_is_refused_by_the_constructor(value: object) -> None:
    with pytest.raises(ValueError, match="intra_op_threads must be None"):
        TorchBackend(intra_op_threads=value)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="inter_op_threads must be None"):
        TorchBackend(inter_op_threads=value)  # type: ignore[arg-type]


def test_the_registry_gives_the_threads_to_the_torch_backends_only(tmp_path: Path) -> None:
    assert [name for name, entry in BUILTIN.items() if entry.uses_threads] == ["torch", "torch-compile"]
    for name in ("torch", "torch-compile"):
        backend = backends.make_backend(Target(name, "cpu"), threads=(1, 2))
        assert isinstance(backend, TorchBackend)
        assert backend.describe()["threads_requested"] == {"intra_op": 1, "inter_op": 2}
    default = backends.make_backend(Target("torch", "cpu"))
    assert isinstance(default, TorchBackend)
    assert default.describe()["threads_requested"] == {"intra_op": "auto", "inter_op": "auto"}
    # Backends that do not take them are built as before.
    assert backends.make_backend(Target("onnxruntime", "cpu"), tmp_path, threads=(1, 2)) is not None
