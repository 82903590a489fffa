"""The resolved pytest-ipu settings of one run (``Settings``) and the words its values share with the
options: ``auto`` and each choice's list.

``options`` fills it from the command line, the environment and the ini file; ``option_values``
parses each value.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

from pytest_ipu.run.plan import TimeCap

if TYPE_CHECKING:
    from pytest_ipu.backends.target import Target
    from pytest_ipu.results.gates import Gate

PRECISIONS = ("fp32", "fp16", "bf16")
MISSING_SDK_POLICIES = ("skip", "fail")
REPEAT_MODES = ("interleaved", "process")
AUTO = "auto"


@dataclass(frozen=True)
class Settings:
    """The resolved pytest-ipu settings of one run.

    ``targets`` is empty for ``auto`` (every default backend present on this machine);
    ``rounds`` is ``None`` for ``auto`` (as many rounds as fit in ``max_time_s``, at least
    ``min_rounds``).
    """

    targets: tuple[Target, ...] = ()
    precision: str = AUTO
    rounds: int | None = None
    warmup_rounds: int = 2
    min_rounds: int = 5
    max_time_s: float = 2.0
    missing_sdk: str = "skip"
    cache_dir: Path = field(default_factory=lambda: Path("~/.cache/pytest-ipu").expanduser())
    power: str = AUTO
    power_hz: float | None = None
    idle_s: float = 5.0
    gates: tuple[Gate, ...] = ()
    baselines: tuple[Path, ...] = ()
    baseline_missing: str = "warn"
    inconclusive: str = "fail"
    drift: float = 0.05
    job_alpha: float = 0.01
    repeats: int = 3
    repeat_mode: str = "interleaved"
    time_cap: TimeCap = field(default_factory=TimeCap)
    unstable_threshold: float = 0.05
    contended_threshold: float = 0.10
    torch_threads: int | None = None
    torch_interop_threads: int | None = None
    call_timeout_s: float = 600.0
    rank_timeout_s: float = 300.0
    scaling_baseline: Path | None = None

    def as_json(self) -> dict[str, Any]:
        """Plain-JSON form, written to the top level of the benchmark JSON."""
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["targets"] = [str(t) for t in self.targets] or AUTO
        out["rounds"] = AUTO if self.rounds is None else self.rounds
        out["cache_dir"] = str(self.cache_dir)
        out["scaling_baseline"] = None if self.scaling_baseline is None else str(self.scaling_baseline)
        out["power_hz"] = AUTO if self.power_hz is None else self.power_hz
        out["gates"] = [str(g) for g in self.gates]
        out["baselines"] = [str(b) for b in self.baselines]
        out["time_cap"] = str(self.time_cap)
        out["torch_threads"] = AUTO if self.torch_threads is None else self.torch_threads
        out["torch_interop_threads"] = (
            AUTO if self.torch_interop_threads is None else self.torch_interop_threads
        )
        return out
