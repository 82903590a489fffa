"""Facts about the host machine that need no runtime: the CPU's name."""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_name(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU model name from /proc/cpuinfo where there is one, else what ``platform`` says."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"
