"""plateau's data focus: which columns (or nested paths) of the records a read returns.

The semantics are plateau's (``plateau_transport::SchemaChunk::focus`` and
``gather_flat_arrays``), so a reply is the same table plateau would send:

- ``dataset``: the paths to return, in order; ``*`` stands for every top-level
  column. Without a ``separator`` a path is one top-level column name, taken
  whole (``a.b`` names a column called ``a.b``); with one, it is split on it
  and walks into structs.
- ``exclude``: paths dropped. Compared whole against each requested path and,
  when flattening, against each nested path joined with the separator.
- ``separator``: flatten what is returned into one table of non-struct
  columns named by their path joined with it, depth first in field order.
- ``max_bytes``: a returned column whose data in the reply is larger than
  this comes back as nulls of the same type (its size estimated as plateau
  does: values only, no validity bitmaps or offsets).
- When exactly one column results and it is a struct, its fields are the table.

Where this differs from plateau, on purpose:

- A focus without ``dataset`` means ``*`` (plateau fails such a query with
  an empty-path error), so ``dataset.exclude=x`` alone drops ``x``.
- A path that matches nothing is an error naming the path (plateau: the same,
  without the name), also for an empty reply whose schema is known.
- ``max_bytes`` also counts binary, boolean and other columns plateau's
  estimate skips (it never nulls those).

Why the reader asks ``columns``: the top-level columns a focus needs are read
alone, so a sealed parquet segment reads only those column chunks and an
Arrow segment decodes only those fields (``sealed_reader``).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from plateau.protocol.errors import InvalidInput

ALL = "*"
MAX_PATHS = 1000
MAX_PATH_CHARS = 1024


@dataclass(frozen=True)
class DataFocus:
    """A read's focus; hashable, so that equal requests share pages prepared ahead."""

    dataset: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    separator: str | None = None
    max_bytes: int | None = None

    def __post_init__(self) -> None:
        for kind, paths in (("dataset", self.dataset), ("dataset.exclude", self.exclude)):
            if len(paths) > MAX_PATHS:
                raise InvalidInput(f"{kind}: at most {MAX_PATHS} paths, got {len(paths)}")
            for path in paths:
                if not path or len(path) > MAX_PATH_CHARS:
                    raise InvalidInput(
                        f"{kind}: a path must be 1 to {MAX_PATH_CHARS} characters, got {path!r}"
                    )
        if self.separator is not None and not self.separator:
            raise InvalidInput("dataset.separator must not be empty")
        if self.max_bytes is not None and self.max_bytes < 0:
            raise InvalidInput(f"dataset.max_bytes must be >= 0, got {self.max_bytes}")

    @property
    def active(self) -> bool:
        return bool(
            self.dataset or self.exclude or self.separator is not None or self.max_bytes is not None
        )

    def _paths(self, schema: pa.Schema) -> list[str]:
        paths: list[str] = []
        for path in self.dataset or (ALL,):
            paths += schema.names if path == ALL else [path]
        excluded = set(self.exclude)
        return [p for p in paths if p not in excluded]

    def _split(self, path: str) -> list[str]:
        return path.split(self.separator) if self.separator is not None else [path]

    def columns(self, schema: pa.Schema) -> tuple[str, ...] | None:
        """The top-level columns of ``schema`` this focus reads, in schema order (None: all).

        None also when a path's first step is not a column, or every path is
        excluded: the whole table is read so that ``apply`` reports it by name.
        """
        if not self.active:
            return None
        wanted = {self._split(p)[0] for p in self._paths(schema)}
        if not wanted or not wanted <= set(schema.names):
            return None
        return tuple(name for name in schema.names if name in wanted)

    def apply(self, table: pa.Table) -> pa.Table:
        """The focused table; an ``InvalidInput`` naming a path that matches nothing."""
        if not self.active:
            return table
        fields: list[pa.Field] = []
        arrays: list[pa.ChunkedArray] = []
        excluded = set(self.exclude)
        for path in self._paths(table.schema):
            column, field = _get(table, self._split(path), path)
            if self.separator is not None:
                self._flatten(path, column, field, excluded, fields, arrays)
            else:
                column = self._limit(column)
                fields.append(pa.field(path, column.type, field.nullable))
                arrays.append(column)
        if not arrays:
            raise InvalidInput("the data focus leaves no column: every requested path is excluded")
        metadata = table.schema.metadata
        if len(arrays) == 1 and pa.types.is_struct(arrays[0].type):
            struct = arrays[0]
            inner = [struct.type.field(i) for i in range(struct.type.num_fields)]
            columns = [_child(struct, i) for i in range(len(inner))]
            return pa.Table.from_arrays(columns, schema=pa.schema(inner, metadata=metadata))
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=metadata))

    def _flatten(
        self,
        key: str,
        column: pa.ChunkedArray,
        field: pa.Field,
        excluded: set[str],
        fields: list[pa.Field],
        arrays: list[pa.ChunkedArray],
    ) -> None:
        """plateau's ``gather_flat_arrays``: non-struct leaves, depth first, named by path."""
        assert self.separator is not None
        if not pa.types.is_struct(column.type):
            column = self._limit(column)
            fields.append(pa.field(key, column.type, field.nullable))
            arrays.append(column)
            return
        for i in range(column.type.num_fields):
            child_field = column.type.field(i)
            name = f"{key}{self.separator}{child_field.name}"
            if name in excluded:
                continue
            self._flatten(name, _child(column, i), child_field, excluded, fields, arrays)

    def _limit(self, column: pa.ChunkedArray) -> pa.ChunkedArray:
        if self.max_bytes is not None and data_bytes(column) > self.max_bytes:
            return pa.chunked_array([pa.nulls(len(column), column.type)], column.type)
        return column


def _get(table: pa.Table, steps: list[str], path: str) -> tuple[pa.ChunkedArray, pa.Field]:
    """plateau's ``get_key_array``: walk ``steps`` from a top-level column into structs."""
    index = table.schema.get_field_index(steps[0])
    if index < 0:
        raise InvalidInput(
            f"dataset path {path!r}: no column {steps[0]!r} "
            f"(columns: {', '.join(table.schema.names) or 'none'})"
        )
    field = table.schema.field(index)
    column = table.column(index)
    for depth, step in enumerate(steps[1:], start=1):
        if not pa.types.is_struct(column.type):
            walked = ".".join(steps[:depth])
            raise InvalidInput(f"dataset path {path!r}: {walked!r} is not a struct")
        child = column.type.get_field_index(step)
        if child < 0:
            names = [column.type.field(i).name for i in range(column.type.num_fields)]
            raise InvalidInput(
                f"dataset path {path!r}: no field {step!r} in {'.'.join(steps[:depth])!r} "
                f"(fields: {', '.join(names)})"
            )
        field = column.type.field(child)
        column = _child(column, child)
    return column, field


def _child(column: pa.ChunkedArray, index: int) -> pa.ChunkedArray:
    """A struct column's child, as plateau takes it: the child's own values and nulls.

    (A null struct row's children keep whatever the child holds, as in
    plateau's ``StructArray::column``; ``flatten`` would merge the parent's
    nulls in, which plateau does not.)
    """
    kind = column.type.field(index).type
    return pa.chunked_array([chunk.field(index) for chunk in column.chunks], kind)


def data_bytes(column: pa.ChunkedArray | pa.Array) -> int:
    """plateau's ``estimate_array_size``: the bytes of the values, without validity or offsets."""
    if isinstance(column, pa.ChunkedArray):
        return sum(_array_bytes(chunk) for chunk in column.chunks)
    return _array_bytes(column)


def _array_bytes(array: pa.Array) -> int:
    kind = array.type
    if pa.types.is_struct(kind):
        return sum(_array_bytes(array.field(i)) for i in range(kind.num_fields))
    if (
        pa.types.is_list(kind)
        or pa.types.is_large_list(kind)
        or pa.types.is_fixed_size_list(kind)
        or pa.types.is_map(kind)
    ):
        return _array_bytes(array.flatten())
    if (
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
    ):
        total = pc.sum(pc.binary_length(array)).as_py()
        return int(total or 0)
    if pa.types.is_dictionary(kind):
        return _array_bytes(array.indices)
    if pa.types.is_boolean(kind):
        return (len(array) + 7) // 8
    width = getattr(kind, "bit_width", 0)
    if width:
        return len(array) * width // 8
    return int(array.nbytes)
