"""The Graphcore IPU backends: PopART (``popart``) and PopTorch (``poptorch``, and its training
steps in ``poptorch_training``).

Nothing here imports an SDK at import time: each backend imports popart or poptorch on first use.
"""
