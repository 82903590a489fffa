"""What a run produced and what is done with it afterwards: typed records and their JSON schema
(``records``, ``schema``), pytest-benchmark's file format (``benchmark_json``), writing files whole
(``atomic``), performance gates (``gates`` grammar, ``decide`` decision rule and runner) and
comparing saved runs (``compare``).

Pure core: no pytest, no SDK.
"""
