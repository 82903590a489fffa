"""MLPerf LoadGen as the load generator of a benchmark (the ``ipu_loadgen`` fixture).

``settings``: the scenarios, settings, LoadGen's ``TestSettings`` and MLPerf's rules (from LoadGen's own
``mlperf.conf``); ``sut``: the query sample library and the batching system under test; ``detail_log``:
``mlperf_log_detail.txt`` read into a verdict and figures; ``runner``: one LoadGen test, its logs kept;
``search``: the peak Server QPS. Nothing here is imported when pytest starts: ``mlperf_loadgen`` (the
``loadgen`` extra) loads with the first LoadGen benchmark.

Documented in docs/loadgen.md and docs/architecture.md (section "Questions a newcomer asks": where is
a LoadGen benchmark run).
"""

from __future__ import annotations
