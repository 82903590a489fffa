"""The ``pytest-ipu`` command: ``main.py`` parses and dispatches; each subcommand is a module of
``commands/``; ``ab.py``, ``doctor.py`` and ``first_contact.py`` do the longer jobs of theirs."""
