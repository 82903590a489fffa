"""MLPerf LoadGen as the load generator of a benchmark (the ``ipu_loadgen`` fixture, docs/loadgen.md).

- ``settings``: the scenarios, the run's settings, LoadGen's ``TestSettings`` made from them, and
  MLPerf's rules (read from LoadGen's own ``mlperf.conf``) to judge compliance by;
- ``sut``: the query sample library over the user's samples and the batching system under test that
  runs a compiled model's instances;
- ``detail_log``: LoadGen's ``mlperf_log_detail.txt`` read into its verdict and figures;
- ``runner``: one LoadGen test from settings to result, the log files kept;
- ``search``: the peak Server QPS under the latency bound, by bisection over the target QPS.

Nothing here is imported when pytest starts: ``mlperf_loadgen`` (the ``loadgen`` extra) loads with
the first LoadGen benchmark.
"""

from __future__ import annotations
