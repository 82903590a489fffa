"""A pytest run that serves rounds to ``pytest-ipu ab`` (``--ipu-serve``): one process per side for a
whole job, its tests run once per round, on request.

In place of pytest's loop over the tests (``pytest_runtestloop``) it answers ``serve_channel``'s
requests, each round's benchmarks written whole (``results.atomic``). Module- and session-scoped
fixtures stay set up between rounds: a round's last test is torn down as far as the round's first test
needs (the next round's tests are some of this round's; a round of one test, as far as its parent), and
the next round first tears down what its own first test does not need (pytest's ``SetupState``). On
``stop``, or when the requests end (``ab`` gone), the session ends as any run ends: fixtures torn down,
files saved, the exit code that of the tests run. Loaded only by a run given ``--ipu-serve``.

Documented in docs/ci.md (section "One process per side: --serve").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_ipu.pytest_plugin import serve_channel
from pytest_ipu.pytest_plugin.bench_seam import runs


class RoundServer:
    """The hooks of a serving run: its loop over the rounds (``pytest_runtestloop``)."""

    def __init__(self, channel: serve_channel.Channel) -> None:
        self.channel = channel

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        """Serve rounds until ``stop`` or the end of the requests (the module docstring); returns
        ``True``: pytest's own loop does not run the tests once more."""
        config = session.config
        if session.testsfailed and not config.option.continue_on_collection_errors:
            # As pytest's own loop: a collection error ends the run before any test; ab sees the
            # channel end before "ready" and says so.
            raise session.Interrupted(f"{session.testsfailed} error(s) during collection")
        if config.option.collectonly:
            return True
        try:
            self.channel.send({"ready": len(session.items)})
            while True:
                request = self.channel.receive()
                if request is None or request.get("stop"):
                    return True
                self.channel.send(self._round(session, request))
        except serve_channel.ChannelError:
            return True  # ab is gone: end the session as a run ends
        finally:
            self.channel.close()

    def _round(self, session: pytest.Session, request: dict[str, Any]) -> dict[str, Any]:
        """Run one round and write its file; the reply."""
        target = Path(str(request.get("run")))
        skip = set(request.get("skip") or ())
        items = [item for item in session.items if item.nodeid not in skip]
        failed_before = session.testsfailed
        runs.start_round(session.config)
        if items:
            # What the previous round left set up and this round's first test does not need.
            session._setupstate.teardown_exact(items[0])
        for index, item in enumerate(items):
            nextitem: pytest.Item | pytest.Collector = (
                items[index + 1] if index + 1 < len(items) else items[0]
            )
            if nextitem is item:
                # A round of one test: torn down to its parent (kept as the round's first test
                # would be), since a test kept set up would not set up again (no fixture values).
                assert item.parent is not None
                nextitem = item.parent
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
            if session.shouldfail:
                raise session.Failed(session.shouldfail)
            if session.shouldstop:
                raise session.Interrupted(session.shouldstop)
        from pytest_ipu.results import atomic

        try:
            atomic.write_bytes(target, runs.round_json(session.config))
        except (OSError, RuntimeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            return {"error": f"cannot write {target}: {why}"}
        return {"done": str(target), "failed": session.testsfailed - failed_before}


def register(config: pytest.Config, value: str) -> None:
    """Make this run serve rounds over ``--ipu-serve``'s descriptors; a usage error for a bad value
    or a run that cannot serve (pytest-xdist's workers would each run the rounds)."""
    try:
        in_fd, out_fd = serve_channel.parse_fds(value)
    except ValueError as exc:
        raise pytest.UsageError(f"pytest-ipu: {exc}") from None
    if getattr(config.option, "numprocesses", None) or getattr(config.option, "dist", "no") != "no":
        raise pytest.UsageError(
            f"pytest-ipu: {serve_channel.OPTION} cannot serve rounds with pytest-xdist (-n/--dist): "
            "drop them from the pytest arguments of pytest-ipu ab"
        )
    config.pluginmanager.register(
        RoundServer(serve_channel.Channel(in_fd, out_fd)), "pytest-ipu-round-server"
    )
