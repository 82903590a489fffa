"""Where models run: the marker's request (``request``), the IPUs present (``inventory``), which
IPU ids each instance gets (``allocate``), the per-instance backends and options and their compile
(``plan``), concurrent instances in threads or worker processes (``instances``) and PopRun
launches (``poprun``).
"""

from __future__ import annotations

#: The variable torchrun's agent sets for its workers: without it no process is under torchrun
#: (``torchrun.detect`` reads it first). Here, not in ``torchrun``, so that the plugin's start-up can
#: look for it without loading any launch code.
TORCHRUN_RUN_ID = "TORCHELASTIC_RUN_ID"
