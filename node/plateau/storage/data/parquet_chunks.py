"""Parquet row groups read with ``O_DIRECT`` and decoded into mimalloc's pool.

Why not through the page cache: a history scan of a parquet topic read each row
group once with ``pread``, after a ``WILLNEED`` hint and before a
``DONTNEED`` drop (``SegmentReader``); the kernel's side of that (read-ahead
allocating pages, copying them out, invalidating them again) was 30% of the
node's CPU with four partition readers (``perf``: ``pread`` 16%,
``posix_fadvise`` 14%). A direct read has the disk write into the buffer:
no page is allocated, copied or dropped.

Why mimalloc's pool (``direct_io.READ_POOL``) for the decoded row group too:
decoding one into jemalloc's memory (the node's default pool) took 4.2 ms
against 1.5 ms into mimalloc's (65,536 rows of 128-byte random values, from a
buffer, one thread): jemalloc returned the freed pages of each decoded row
group to the kernel and faulted them in again for the next one.

The reader decodes from the bytes read, through a file-like window that
answers at their file offsets, with the file's own parsed footer: the
column chunks it asks for are the ones read, nothing else is touched.

Why text columns stored with a dictionary are read as dictionaries and cast
back (``dictionary_leaves``, ``dense``): Parquet's own decoder materialises such a
column value by value through a builder (an append, a capacity check and a
status per value: ``perf`` of a node serving the ML-log workload's reads put
28% of its CPU there). Read as a dictionary, a column is only its indices;
Arrow's cast then gathers the values in one vectorised pass. A 500,000-row
ML-log segment: 57.8 ms of CPU decoded, 33.8 ms read as dictionaries and cast.
The rows and the schema are the same either way: a reply never carries a
dictionary the writer did not send.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from plateau.storage.data.direct_io import READ_POOL, read_bytes_direct
from plateau.storage.data.sealed_writer import is_text, leaf_ranges

Range = tuple[int, int]
"""A byte range of the file: (offset, length)."""


def row_group_end(group: pq.RowGroupMetaData) -> int:
    """File offset just past a row group's column chunks."""
    return max((start + length for start, length in _chunk_ranges(group)), default=0)


def column_ranges(group: pq.RowGroupMetaData, leaves: Sequence[int]) -> list[Range]:
    """Where leaf columns ``leaves`` of a row group lie, adjacent chunks merged into one."""
    wanted = set(leaves)
    ranges = sorted(r for i, r in enumerate(_chunk_ranges(group)) if i in wanted)
    merged: list[Range] = []
    for start, length in ranges:
        if merged and merged[-1][0] + merged[-1][1] == start:
            merged[-1] = (merged[-1][0], merged[-1][1] + length)
        else:
            merged.append((start, length))
    return merged


def _chunk_ranges(group: pq.RowGroupMetaData) -> list[Range]:
    ranges = []
    for j in range(group.num_columns):
        column = group.column(j)
        start = column.dictionary_page_offset
        if start is None or start <= 0:
            start = column.data_page_offset
        ranges.append((start, column.total_compressed_size))
    return ranges


def dictionary_leaves(group: pq.RowGroupMetaData, schema: pa.Schema) -> list[int]:
    """Leaf indices of the top-level text columns ``group`` stores with a dictionary page.

    (A chunk whose dictionary overflowed and fell back to plain pages is still
    read right, only slower: Arrow then builds the dictionary by hashing.)
    """
    return [
        leaves[0]
        for field, leaves in zip(schema, leaf_ranges(schema), strict=True)
        if len(leaves) == 1 and is_text(field.type) and group.column(leaves[0]).has_dictionary_page
    ]


def dense(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with each column read as a dictionary cast back to its type in ``schema``."""
    for i, (name, column) in enumerate(zip(table.column_names, table.columns, strict=True)):
        wanted = schema.field(name)
        if pa.types.is_dictionary(column.type) and not pa.types.is_dictionary(wanted.type):
            table = table.set_column(i, wanted, pc.cast(column, wanted.type, memory_pool=READ_POOL))
    return table


def leaf_indices(schema: pa.Schema, columns: Sequence[str]) -> list[int]:
    """The Parquet leaf columns of top-level ``columns`` (each a contiguous run, in order)."""
    wanted = set(columns)
    return [
        i
        for field, leaves in zip(schema, leaf_ranges(schema), strict=True)
        if field.name in wanted
        for i in leaves
    ]


class DirectRowGroups:
    """Decodes a sealed Parquet file's row groups from direct reads of their bytes.

    Safe to share between threads: each read opens its own Arrow reader (over
    the file's parsed footer, 0.1 ms) and the descriptor is read with ``pread``.
    """

    def __init__(self, fd: int, meta: pq.FileMetaData, size: int) -> None:
        self._fd = fd
        self._meta = meta
        self._schema = meta.schema.to_arrow_schema()  # as written: no dictionaries read
        self._size = size

    def read(self, chunk: int, columns: Sequence[str] | None) -> pa.Table:
        """Row group ``chunk``: every column, or only ``columns`` (top-level names)."""
        group = self._meta.row_group(chunk)
        if columns is None:
            leaves = list(range(group.num_columns))
            indices = None
        else:
            leaves = leaf_indices(self._schema, columns)
            indices = leaves
        pieces = [
            (start, read_bytes_direct(self._fd, start, length))
            for start, length in column_ranges(group, leaves)
        ]
        reader = pq.ParquetReader(memory_pool=READ_POOL)
        window = pa.PythonFile(_Window(pieces, self._size), mode="r")
        dictionaries = dictionary_leaves(group, self._schema)
        reader.open(window, pre_buffer=False, metadata=self._meta, read_dictionary=dictionaries)
        try:
            table = reader.read_row_groups([chunk], column_indices=indices, use_threads=False)
        finally:
            reader.close()
        table = dense(table, self._schema)
        # leaves come back in the file's order; a projection's columns in the order asked for
        return table if columns is None else table.select(list(columns))


class _Window:
    """A read-only file whose only readable bytes are ``pieces``, at their file offsets.

    ``read_buffer`` hands Arrow a slice of a piece, no copy; a read outside
    the pieces is a bug in ``column_ranges`` and raises instead of guessing.
    """

    def __init__(self, pieces: list[tuple[int, pa.Buffer]], size: int) -> None:
        self._pieces = pieces
        self._size = size
        self._pos = 0
        self.closed = False

    def read_buffer(self, nbytes: int) -> pa.Buffer:
        at = self._pos
        for start, data in self._pieces:
            if start <= at and at + nbytes <= start + data.size:
                self._pos = at + nbytes
                return data.slice(at - start, nbytes)
        raise OSError(f"parquet read of {nbytes} bytes at {at}: outside the bytes read")

    def read(self, nbytes: int = -1) -> bytes:
        if nbytes < 0:
            nbytes = self._size - self._pos
        return bytes(self.read_buffer(nbytes).to_pybytes())

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True
