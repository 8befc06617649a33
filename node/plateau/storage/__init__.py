"""The node's storage engine, in two rooms under the engine that joins them.

- ``data``: segment formats and their readers and writers (the open Arrow segment,
  sealed Parquet/Arrow files, footers, direct I/O, the decoded-chunk cache, crash
  recovery of a segment's bytes).
- ``catalog``: the bookkeeping (the SQLite manifest, topics, retention, locks, the
  memory budget, progress, group commit, ownership, ``snapshot.json``).

``engine``, ``partition`` and ``record_reads`` use both; nothing in ``data`` or
``catalog`` imports them back. Only the server and ``plateau node`` import storage.
"""
