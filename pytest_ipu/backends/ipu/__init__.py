"""The Graphcore IPU backends: PopART (``popart``; the ONNX model it gets is prepared in
``popart_onnx``, its session run in ``popart_runner``), PopTorch (``poptorch``, and its training
steps in ``poptorch_training``), and the option checks both share (``options``:
``available_memory_proportion``, one rule and one message).

Nothing here imports an SDK at import time: each backend imports popart or poptorch on first use.
"""
