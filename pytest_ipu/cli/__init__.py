"""The ``pytest-ipu`` command (``main.py``): compare, summary, report, merge, ab and doctor."""
