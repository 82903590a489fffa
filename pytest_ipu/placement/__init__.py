"""Where models run: the marker's request (``request``), the IPUs present (``inventory``), which
IPU ids each instance gets (``allocate``), the per-instance backends and options and their compile
(``plan``), concurrent instances in threads or worker processes (``instances``) and PopRun
launches (``poprun``).
"""
