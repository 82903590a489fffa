"""``python -m pytest_ipu.cli``: the ``pytest-ipu`` command."""

from __future__ import annotations

import sys

from pytest_ipu.cli.main import main

sys.exit(main())
