"""Running a prepared PopART session: inputs in PopART's layout, one ``session.run`` per call, the
outputs as views of the anchor arrays with PopART's prefix dimensions merged back.

One ``run`` executes ``batches_per_step`` batches on each of ``replicated_graphs`` replicas: the
inputs go to ``PyStepIO`` as ``[batches_per_step, replicas, micro_batch, ...]`` (dimensions of 1
dropped), and each anchor array has the prefix dimensions its anchor mode gives (see
``initAnchorArrays`` in the SDK).
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from pytest_ipu.backends.ipu.popart_onnx import Prepared
from pytest_ipu.backports import zip_strict

__all__ = ["Layout", "Runner", "as_array", "layout"]


@dataclass(frozen=True)
class Layout:
    """How one call's items are laid out for PopART: ``[batches_per_step, replicas, micro_batch, ...]``."""

    prefix: tuple[int, ...]  # the prefix dimensions other than 1

    def to_popart(self, array: np.ndarray) -> np.ndarray:
        """Split the leading dimension into the prefix dimensions and the micro-batch."""
        if not self.prefix:
            return array
        return array.reshape(*self.prefix, -1, *array.shape[1:])


def layout(bps: int, replicas: int) -> Layout:
    """The layout of ``bps`` batches on ``replicas`` replicas (prefix dimensions of 1 dropped)."""
    return Layout(tuple(d for d in (bps, replicas) if d != 1))


class Runner:
    """One synchronous ``session.run`` on prepared inputs; outputs are views of the anchor arrays."""

    def __init__(
        self,
        popart: ModuleType,
        session: Any,
        device: Any,
        prepared: Prepared,
        anchors: Mapping[str, np.ndarray],
        layout: Layout,
        anchor_mode: str,
        bps: int,
        replicas: int,
    ) -> None:
        self._popart, self._session, self._device = popart, session, device
        self._prepared, self._anchors, self._layout = prepared, dict(anchors), layout
        self._stepio: Any = None
        self._stepio_inputs: tuple[object, ...] = ()
        self._closed = False
        prefix = _anchor_prefix(anchor_mode, bps, replicas)
        self._outputs = tuple(_merge_prefix(self._anchors[oid], prefix) for oid in prepared.output_ids)

    def prepare_inputs(self, values: Sequence[object]) -> tuple[object, ...]:
        """Contiguous arrays of the model's dtypes and compiled shapes, in PopART's layout."""
        p = self._prepared
        if len(values) != len(p.input_ids):
            raise ValueError(
                f"the ONNX model takes {len(p.input_ids)} input(s) ({', '.join(p.input_ids)}), "
                f"got {len(values)}"
            )
        out = []
        for name, value, dtype, shape in zip_strict(p.input_ids, values, p.input_dtypes, p.call_shapes):
            array = as_array(value, dtype)
            if array.shape != shape:
                # PopART checks buffer sizes on the first run only; a wrong size later reads wrong memory.
                raise ValueError(
                    f"input {name!r} has shape {tuple(array.shape)} but the PopART session was compiled "
                    f"for {shape}; compile again for other shapes (a session's batch is fixed)"
                )
            out.append(np.ascontiguousarray(self._layout.to_popart(array)))
        return tuple(out)

    def run(self, *arrays: object) -> tuple[np.ndarray, ...]:
        """Run one step; the returned arrays are overwritten in place by the next call."""
        if self._closed:
            raise RuntimeError("this compiled model was closed (the run that compiled it has ended)")
        if len(arrays) != len(self._stepio_inputs) or any(
            a is not b for a, b in zip_strict(arrays, self._stepio_inputs)
        ):
            # A PyStepIO holds its arrays and wraps its read offsets after each full step, so one
            # built for these very arrays serves every later call with them.
            inputs = dict(zip_strict(self._prepared.input_ids, arrays))
            self._stepio = self._popart.PyStepIO(inputs, self._anchors)
            self._stepio_inputs = tuple(arrays)
        self._session.run(self._stepio)
        return self._outputs

    def cycle_count(self) -> int:
        """The device cycles of the last ``run`` (``Session.getCycleCount``: the main program's, on
        tile 0 of the first replica); it runs a program of its own that copies the count to the
        host, so it is read outside timed rounds. The SDK raises where the counter is off."""
        if self._closed:
            raise RuntimeError("this compiled model was closed (the run that compiled it has ended)")
        return int(self._session.getCycleCount())

    def close(self) -> None:
        """Detach the IPUs and drop the session; idempotent. Later ``run`` calls raise ``RuntimeError``."""
        if self._closed:
            return
        self._closed = True
        device, self._device = self._device, None
        self._session = self._stepio = None
        self._stepio_inputs = ()
        try:
            device.detach()
        except Exception as exc:
            raise RuntimeError(f"PopART could not detach the device: {exc}") from exc


def _anchor_prefix(anchor_mode: str, bps: int, replicas: int) -> int:
    """How many prefix dimensions an anchor array has: ``[bps, replicas]`` for ALL, ``[bps // N, replicas]``
    for EVERYN, ``[replicas]`` for FINAL and SUM, dimensions of 1 dropped (PopART's ``initAnchorArrays``)."""
    if anchor_mode == "all":
        dims = [bps, replicas]
    elif anchor_mode in ("final", "sum"):
        dims = [replicas]
    else:
        dims = [bps // int(anchor_mode.partition(":")[2]), replicas]
    return sum(d != 1 for d in dims)


def _merge_prefix(array: np.ndarray, prefix: int) -> np.ndarray:
    """A view with the first ``prefix`` dimensions merged into the model's own leading dimension."""
    if prefix == 0:
        return array
    own = array.shape[prefix:]
    lead = int(np.prod(array.shape[:prefix]))
    return array.reshape(lead * own[0], *own[1:]) if own else array.reshape(lead)


def as_array(value: object, dtype: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # torch tensors, possibly on a device or in bf16 (numpy has none)
        tensor = value.detach().cpu()
        if str(tensor.dtype) == "torch.bfloat16":
            tensor = tensor.float()
        value = tensor.numpy()
    array = np.asarray(value)
    if dtype is not None and array.dtype != dtype:
        array = array.astype(dtype)
    return array
