"""The history sink: it lands every message it is sent as a JSON line in the lake's landing
area (``sink.py`` the sink, ``landing.py`` the files, ``lines.py`` the lines, ``config.py``
its section), fsynced before it ACKs. No PySpark: what compacts, queries and replays the
lake is :mod:`fleetwatch.lake` (docs/concepts/history.md).
"""
