"""Arrow replies as pieces: the bytes pyarrow's writer makes, sent whole by ``sendmsg``.

``codecs.arrow_pieces`` and ``encode_stored`` leave a page in the pieces
pyarrow's writer hands over, and ``front_wire.send_pieces`` sends them with
scatter-gather. What a reader relies on: the bytes on the wire are exactly
what pyarrow's IPC writer makes of the page (so every reader decodes the same rows,
schema and metadata), whatever the columns, the slice and the socket's
pace. What the change is for: the page's large buffers are the decoded
columns' own memory, never copied into a reply buffer.

A socketpair (local, no network) stands in for the client's connection: the
partial sends it forces are the kernel's, not a mock's.
"""

from __future__ import annotations

import itertools
import socket
import threading

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from plateau.protocol import ARROW_FILE, ARROW_STREAM
from plateau.server.codecs import arrow_pieces, encode_arrow
from plateau.server.front_wire import IOV_BATCH, Gone, send_pieces
from plateau.server.reply_pieces import COALESCE_BELOW, ReplyPieces

META = {"status": '"RecordLimited"', "span": '{"start":3,"end":20003}'}


def _rows(n: int) -> pa.Table:
    rng = np.random.default_rng(7)
    ints = pa.array(rng.integers(0, 1 << 40, n))
    text = pa.array([None if i % 7 == 3 else f"value-{i}" * (i % 5) for i in range(n)])
    nested = pa.array([{"a": list(range(i % 4)), "b": i % 3 == 0} for i in range(n)])
    return pa.table(
        {
            "time": pa.array(range(n), pa.int64()),
            "ints": ints,
            "text": text,
            "floats": pa.array(rng.standard_normal(n)),
            "nested": nested,
            "labels": pa.array([f"l{i % 3}" for i in range(n)]).dictionary_encode(),
        }
    )


TABLE = _rows(30_000)


@pytest.mark.parametrize("media", [ARROW_FILE, ARROW_STREAM])
@pytest.mark.parametrize(
    "table",
    [
        TABLE,
        TABLE.slice(3, 20_000),  # a page cut from a row group: offsets rebased, bitmaps shifted
        pa.concat_tables([TABLE.slice(5, 100), TABLE.slice(9_001, 4_000)]),  # two chunks
        TABLE.slice(0, 0),
        pa.table({}),
    ],
    ids=["whole", "slice", "chunks", "empty", "no-columns"],
)
def test_the_pieces_are_the_bytes_pyarrow_s_writer_makes(table: pa.Table, media: str) -> None:
    pieces = arrow_pieces(table, media, META)
    joined = bytes(pieces.join())
    assert joined == bytes(encode_arrow(table, media, META))
    expected = pa.BufferOutputStream()  # pyarrow's own, into one growing buffer
    with_meta = table.replace_schema_metadata({k.encode(): v.encode() for k, v in META.items()})
    new = ipc.new_file if media == ARROW_FILE else ipc.new_stream
    with new(expected, with_meta.schema) as writer:
        writer.write_table(with_meta)
    assert joined == expected.getvalue().to_pybytes()
    assert pieces.nbytes == len(joined)
    buf = pa.py_buffer(joined)
    back = (ipc.open_file(buf) if media == ARROW_FILE else ipc.open_stream(buf)).read_all()
    assert back.equals(table)
    assert back.schema.metadata[b"status"] == b'"RecordLimited"'


def test_a_page_s_large_buffers_are_the_columns_own_memory() -> None:
    page = TABLE.slice(1_000, 20_000)
    addresses = {
        p.address for p in arrow_pieces(page, ARROW_FILE, META).pieces if isinstance(p, pa.Buffer)
    }
    ints = page.column("ints").chunk(0)
    floats = page.column("floats").chunk(0)
    for column in (ints, floats):
        values = column.buffers()[1]
        assert values.address + column.offset * 8 in addresses  # a view, not a copy


def test_small_pieces_are_coalesced() -> None:
    wide = pa.table({f"c{i}": pa.array([i, i + 1], pa.int32()) for i in range(600)})
    pieces = arrow_pieces(wide, ARROW_FILE, META)
    assert len(pieces.pieces) < 60  # 600 columns of 2 values: a few KiB pieces, not thousands
    sizes = [_size(p) for p in pieces.pieces]
    # a short piece only before a large one (or last): never two short ones side by side
    assert not any(a < COALESCE_BELOW and b < COALESCE_BELOW for a, b in itertools.pairwise(sizes))


def _size(piece: object) -> int:
    return piece.size if isinstance(piece, pa.Buffer) else len(piece)  # type: ignore[arg-type]


def _received(pieces: list[bytes | pa.Buffer], sndbuf: int = 4096) -> bytes:
    """What the far end of a socketpair reads while ``send_pieces`` sends, slowly taken."""
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, sndbuf)
    a.settimeout(10.0)
    got = bytearray()

    def read() -> None:
        while chunk := b.recv(1000):  # small reads: every sendmsg stops part-way
            got.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        send_pieces(a, pieces)
        a.shutdown(socket.SHUT_WR)
        reader.join(timeout=30)
        assert not reader.is_alive(), "the reader stalled"
    finally:
        a.close()
        b.close()
    return bytes(got)


def test_send_pieces_sends_every_byte_in_order_across_partial_sends() -> None:
    rng = np.random.default_rng(1)
    pieces: list[bytes | pa.Buffer] = []
    for i in range(3 * IOV_BATCH + 7):  # more pieces than one sendmsg takes
        size = int(rng.integers(0, 3000)) if i % 50 else 70_000
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        pieces.append(pa.py_buffer(data) if i % 2 else data)
    pieces.insert(5, b"")  # an empty piece is skipped, not an error
    assert _received(pieces) == b"".join(bytes(memoryview(p)) for p in pieces)


def test_a_reply_in_pieces_arrives_as_the_reader_decodes_it() -> None:
    page = TABLE.slice(11, 25_000)
    pieces = arrow_pieces(page, ARROW_FILE, META)
    body = _received(list(pieces.pieces), sndbuf=16384)
    assert ipc.open_file(pa.py_buffer(body)).read_all().equals(page)


def test_a_client_that_stops_reading_is_gone_not_a_hang() -> None:
    a, b = socket.socketpair()
    a.settimeout(0.3)
    try:
        with pytest.raises(Gone):
            send_pieces(a, [bytes(8 << 20)])  # nobody reads: the send stalls past the timeout
    finally:
        a.close()
        b.close()


def test_join_is_one_buffer_of_all_pieces() -> None:
    pieces = ReplyPieces([b"ab", pa.py_buffer(b"cde"), memoryview(b"f")])
    assert pieces.nbytes == 6
    assert bytes(pieces.join()) == b"abcdef"
