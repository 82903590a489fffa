"""Presentation: terminal tables (``terminal``), plots (``plots``, matplotlib) and the HTML page
(``html``). Reads typed records; never writes or parses them back from text.
"""
