"""Starting a child that Ctrl-C can reach, whatever this process inherited; whether one is gone.

A process started with SIGINT ignored (a job a non-interactive shell put in the background does
that) passes the ignoring on to every child across ``exec``, and Python then installs no
KeyboardInterrupt handler in them: a test that sends SIGINT to such a child would wait for nothing.
``popen`` gives the child SIGINT's default action, as a terminal's Ctrl-C finds it.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from typing import Any


def popen(*args: Any, **kwargs: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(*args, **kwargs)``, the child's SIGINT at its default action: while it
    starts, an ignored SIGINT here is handled instead (a handler, unlike an ignored signal, does not
    survive ``exec``), then ignored again. Popen returns once the child has exec'd."""
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if not ignored or threading.current_thread() is not threading.main_thread():
        return subprocess.Popen(*args, **kwargs)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(*args, **kwargs)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def gone(pid: int) -> bool:
    """Whether process ``pid`` is gone, reaped (a zombie still answers signal 0)."""
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False
