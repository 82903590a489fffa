"""The ONNX model as a PopART ``InferenceSession`` gets it: read, its opset checked, every input's
shape fixed to the micro-batch, its virtual-graph annotations checked, the convolutions' available
memory proportion set, and converted to fp16 when asked.

PopART compiles static shapes for ONNX opsets 6 to 11 (see ``popart``'s module docstring for the
SDK's rules and the ResNeXt-101 example this follows). ``onnx`` is imported inside ``prepare`` only:
``import popart`` fails once onnx is imported, so the backend imports popart first.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from pytest_ipu.backends.ipu.options import MemoryProportions
from pytest_ipu.backports import zip_strict
from pytest_ipu.errors import CompileError

__all__ = ["MAX_OPSET", "MIN_OPSET", "ModelRequest", "Prepared", "prepare"]

#: The ONNX (``ai.onnx``) opsets PopART 3.x imports.
MIN_OPSET = 6
MAX_OPSET = 11
#: The ONNX node attribute ``popart.Builder.pipelineStage`` writes (``sPipelineStageAttribute``).
_PIPELINE_STAGE_ATTRIBUTE = "__pipeline_stage"
#: The ONNX node attribute ``popart.Builder.virtualGraph`` writes (``sVirtualGraphAttribute``).
_VIRTUAL_GRAPH_ATTRIBUTE = "__ipu_number"
_FLOAT, _FLOAT16 = 1, 10  # onnx.TensorProto.FLOAT and FLOAT16


@dataclass(frozen=True)
class ModelRequest:
    """What the session needs of the model: a call's layout, the precision, the split over IPUs and
    the memory proportions (checked options, as ``popart`` resolved them)."""

    micro_batch: int
    batches_per_step: int
    replicated_graphs: int
    #: IPUs per replica.
    ipus: int
    precision: str
    #: A torch model exported in fp32 whatever the precision (converted here, as the example did).
    from_torch: bool
    virtual_graph_mode: str | None
    pipelining: bool
    #: Per IPU of a replica, from ``options.memory_proportions``; ``None`` leaves PopART's default.
    memory: MemoryProportions | None
    #: The ``available_memory_proportion`` option as given, for messages.
    memory_option: object = None


@dataclass(frozen=True)
class Prepared:
    """The ONNX model as the session gets it, with what running it needs to know."""

    proto: bytes
    input_ids: tuple[str, ...]
    input_dtypes: tuple[Any, ...]
    #: Each input's shape for one call, as the caller passes it (leading dimension: all items).
    call_shapes: tuple[tuple[int, ...], ...]
    output_ids: tuple[str, ...]
    opset: int
    fp16_conversion: str | None
    #: How many convolutions got ``available_memory_proportion``; ``None`` when it was not set.
    memory_convs: int | None = None


def prepare(
    popart: ModuleType, source: bytes | str, label: str, arrays: Sequence[np.ndarray], request: ModelRequest
) -> Prepared:
    """Load the ONNX model, check its opset, fix every input's shape, check its annotations, set the
    convolutions' memory proportion and convert it to fp16 if asked."""
    import onnx  # after popart (see the module docstring)

    proto = _load(onnx, source, label)
    opset = _opset(proto, label)
    _fix_shapes(proto.graph, arrays, request, label)
    _check_annotations(proto.graph, request, label)
    proto, memory_convs = _set_memory_proportions(popart, onnx, proto, request, label)
    proto, conversion = _convert_precision(popart, onnx, proto, request, label)
    inputs = _inputs(proto.graph)
    to_numpy = _onnx_to_numpy(onnx)
    total = request.micro_batch * request.batches_per_step * request.replicated_graphs
    return Prepared(
        proto=proto.SerializeToString(),
        input_ids=tuple(vi.name for vi in inputs),
        input_dtypes=tuple(np.dtype(to_numpy(vi.type.tensor_type.elem_type)) for vi in inputs),
        call_shapes=tuple((total, *a.shape[1:]) for a in arrays),
        output_ids=tuple(o.name for o in proto.graph.output),
        opset=opset,
        fp16_conversion=conversion,
        memory_convs=memory_convs,
    )


def _load(onnx: ModuleType, source: bytes | str, label: str) -> Any:
    try:
        return onnx.load_from_string(source) if isinstance(source, bytes) else onnx.load(source)
    except Exception as exc:
        raise CompileError(f"could not read the ONNX model {label}: {type(exc).__name__}: {exc}") from exc


def _opset(proto: Any, label: str) -> int:
    """The model's ``ai.onnx`` opset, one PopART 3.x imports."""
    opset = max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise CompileError(
            f"the ONNX model {label} uses ONNX opset {opset}, and PopART 3.x imports opsets {MIN_OPSET} to "
            f"{MAX_OPSET} only; export it at opset {MAX_OPSET} (torch.onnx.export(..., "
            f"opset_version={MAX_OPSET}), with dynamo=False on torch 2.5 and newer)"
        )
    return int(opset)


def _inputs(graph: Any) -> list[Any]:
    """The graph's real inputs: ONNX lists initializers (weights) among the inputs too."""
    initializers = {t.name for t in graph.initializer}
    return [vi for vi in graph.input if vi.name not in initializers]


def _fix_shapes(graph: Any, arrays: Sequence[np.ndarray], request: ModelRequest, label: str) -> None:
    """Every input's batch fixed to the micro-batch, and the batch symbols everywhere else too."""
    inputs = _inputs(graph)
    if len(inputs) != len(arrays):
        names = ", ".join(vi.name for vi in inputs)
        raise CompileError(
            f"the ONNX model {label} takes {len(inputs)} input(s) ({names}), "
            f"got {len(arrays)} example input(s)"
        )
    symbols: dict[str, int] = {}
    for vi, array in zip_strict(inputs, arrays):
        _fix_shape(vi, array, request, label, symbols)
    # Outputs and intermediate values may carry the same batch symbols: make them concrete too.
    for vi in [*graph.output, *graph.value_info]:
        for dim in vi.type.tensor_type.shape.dim:
            if dim.HasField("dim_param") and dim.dim_param in symbols:
                dim.dim_value = symbols[dim.dim_param]


def _fix_shape(
    vi: Any, array: np.ndarray, request: ModelRequest, label: str, symbols: dict[str, int]
) -> None:
    """Set the input's unknown dimensions from the example (batch: the micro-batch); check known ones."""
    micro, bps, replicas = request.micro_batch, request.batches_per_step, request.replicated_graphs
    dims = vi.type.tensor_type.shape.dim
    wanted = (micro, *array.shape[1:])
    declared = tuple(d.dim_value if d.HasField("dim_value") else d.dim_param for d in dims)
    if len(dims) != len(wanted):
        raise CompileError(
            f"input {vi.name!r} of the ONNX model {label} has {len(dims)} dimension(s) but the example input "
            f"has shape {tuple(array.shape)}; pass inputs of the model's rank"
        )
    for k, (dim, want) in enumerate(zip_strict(dims, wanted)):
        if dim.HasField("dim_value") and dim.dim_value > 0:
            if dim.dim_value == want:
                continue
            if k == 0:
                items = dim.dim_value * bps * replicas
                raise CompileError(
                    f"the ONNX model {label} fixes input {vi.name!r} to batch {dim.dim_value}, so a call "
                    f"takes {dim.dim_value} x batches_per_step={bps} x replicated_graphs={replicas} = "
                    f"{items} items, but the inputs have {array.shape[0]}; pass inputs with leading "
                    f"dimension {items}"
                )
            raise CompileError(
                f"input {vi.name!r} of the ONNX model {label} has shape {declared} but the example input has "
                f"{tuple(array.shape)} (micro-batch {micro}); pass inputs of the model's shape"
            )
        if dim.HasField("dim_param"):
            symbols[dim.dim_param] = want
        # Setting dim_value clears dim_param (they are one protobuf oneof).
        dim.dim_value = want


def _check_annotations(graph: Any, request: ModelRequest, label: str) -> None:
    """Manual virtual graphs need annotated ops, and a pipeline a batch per annotated stage."""
    if request.virtual_graph_mode != "manual":
        return
    if not any(a.name == _VIRTUAL_GRAPH_ATTRIBUTE for node in graph.node for a in node.attribute):
        raise CompileError(
            f"popart option virtual_graph_mode='manual' needs ops annotated with "
            f"popart.Builder.virtualGraph, and the ONNX model {label} has none; use 'auto'"
        )
    stages = _annotated_stages(graph)
    if request.pipelining and request.batches_per_step < stages:
        raise CompileError(
            f"popart option batches_per_step={request.batches_per_step} for {label} is fewer than the "
            f"model's {stages} annotated pipeline stages; PopART needs at least one batch per stage to fill "
            f"the pipeline: pass batches_per_step={stages} or more"
        )


def _annotated_stages(graph: Any) -> int:
    """Distinct ``__pipeline_stage`` values, or else distinct virtual graphs: PopART uses an op's
    virtual graph as its stage when no stage is annotated."""
    for attribute in (_PIPELINE_STAGE_ATTRIBUTE, _VIRTUAL_GRAPH_ATTRIBUTE):
        values = {a.i for node in graph.node for a in node.attribute if a.name == attribute}
        if values:
            return len(values)
    return 1


def _set_memory_proportions(
    popart: ModuleType, onnx: ModuleType, proto: Any, request: ModelRequest, label: str
) -> tuple[Any, int | None]:
    """The model with each convolution's proportion set, and how many got one (``None``: unset).

    As Graphcore's ResNeXt-101 example does: every Conv output gets the proportion through the
    Builder (which writes the ``__available_memory`` node attribute), before any fp16 conversion.
    """
    if request.memory is None:
        return proto, None
    proportions = _conv_proportions(proto.graph, request, label)
    builder = popart.Builder(proto.SerializeToString())
    for tensor_id, proportion in proportions.items():
        builder.setAvailableMemoryProportion(tensor_id, proportion)
    return onnx.load_from_string(builder.getModelProto()), len(proportions)


def _conv_proportions(graph: Any, request: ModelRequest, label: str) -> dict[str, float]:
    """Each Conv output's proportion: that of the IPU its op is annotated to (``__ipu_number``), or of
    IPU 0 on a one-IPU model; IPUs the table leaves out keep PopART's default."""
    table = request.memory or {}
    values = {table.get(ipu) for ipu in range(request.ipus)}
    # The one proportion of every IPU, for convolutions PopART places itself (virtual_graph_mode='auto').
    uniform = values.pop() if len(values) == 1 else None
    out: dict[str, float] = {}
    for node in graph.node:
        if node.op_type != "Conv":
            continue
        ipu = next((a.i for a in node.attribute if a.name == _VIRTUAL_GRAPH_ATTRIBUTE), None)
        if ipu is None and request.ipus == 1:
            ipu = 0
        proportion = uniform if ipu is None else table.get(int(ipu))
        if ipu is None and uniform is None and len(table):
            raise CompileError(
                f"popart option available_memory_proportion={request.memory_option!r} for {label} gives the "
                f"IPUs different proportions, but convolution {node.output[0]!r} has no IPU annotation "
                "(PopART places it itself); pass one number for every IPU, or annotate the ops with "
                "popart.Builder.virtualGraph and use virtual_graph_mode='manual'"
            )
        if proportion is not None:
            out[node.output[0]] = proportion
    return out


def _convert_precision(
    popart: ModuleType, onnx: ModuleType, proto: Any, request: ModelRequest, label: str
) -> tuple[Any, str | None]:
    """The model in the precision asked for, and the conversion made (``None``: none)."""
    inputs = _inputs(proto.graph)
    floats = {vi.type.tensor_type.elem_type for vi in inputs} | {t.data_type for t in proto.graph.initializer}
    model_precision = "fp32" if _FLOAT in floats else "fp16" if _FLOAT16 in floats else None
    if not request.from_torch and model_precision == "fp16" and request.precision == "fp32":
        raise CompileError(
            f"the ONNX model {label} is fp16 but precision fp32 was asked for; pass precision='fp16'"
        )
    if model_precision == "fp32" and request.precision == "fp16":
        transformer = popart.GraphTransformer(proto.SerializeToString())
        transformer.convertFloatsToHalfs()
        return onnx.load_from_string(transformer.getModelProto()), "GraphTransformer.convertFloatsToHalfs"
    return proto, None


def _onnx_to_numpy(onnx: ModuleType) -> Any:
    """ONNX element type -> numpy dtype."""
    # onnx 1.13 added this helper; 1.12 (the floor on Python 3.8, the newest that takes PopART 3.4's
    # protobuf 3.17.3) has only the table it reads.
    to_numpy = getattr(onnx.helper, "tensor_dtype_to_np_dtype", None)
    if to_numpy is None:
        to_numpy = importlib.import_module("onnx.mapping").TENSOR_TYPE_TO_NP_TYPE.get
    return to_numpy
