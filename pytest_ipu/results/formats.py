"""The output formats of the commands that print findings, in one light module: the command's parser
offers them as choices without importing the modules that compute the findings (``pytest-ipu --help``
imports no numpy)."""

from __future__ import annotations

#: ``compare`` and ``ab``: a text table, markdown, CSV.
TABLES = ("table", "markdown", "csv")
#: ``history``: a text table, markdown, JSON (docs/json-schema.md).
HISTORY = ("table", "markdown", "json")
