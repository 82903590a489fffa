"""Measuring one benchmark: warm-up and timed rounds (``timing``), the record built from them
(``run``), latency summaries and throughput (``metrics``), percentiles and significance tests
(``stats``), and units (``units``).

Pure core: no pytest, no SDK. Submodules are imported where they are used; this package imports
nothing so that ``pytest_ipu.measure.units`` stays as light as it looks.
"""
