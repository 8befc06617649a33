"""The node's storage engine: two rooms below the modules that join them.

- ``data``: segment formats and their readers and writers (the open Arrow segment,
  sealed Parquet/Arrow files, footers, direct I/O, the decoded-chunk cache, group
  commit, the durable-write primitives). Imports nothing else of storage but ``types``.
- ``catalog``: the bookkeeping (the SQLite manifest, locks, the memory budget,
  progress, ownership). May use ``data``'s primitives, never the reverse.
- Above both: ``partition`` (one writer, its open and sealed segments), then
  ``topics``, ``retention``, ``recovery`` and ``record_reads``, then
  ``snapshot_writer``, then ``engine``, the one object the server talks to.

The rules are import-linter contracts in pyproject.toml (``storage-rooms``), checked by
tests/unit/test_layers.py. Only the server and ``plateau node`` import storage.
"""
