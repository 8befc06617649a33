"""The JVM url reader speaks the wire contract that ``plateau.protocol`` writes down.

The Java sources cannot import the Python names, so this test reads them: every wire
string the JVM reader spells (media types, ``x-`` headers, page-size constants) must be
one of ``plateau.protocol``'s values, and the ones it relies on must be there. A change
on either side without the other fails here rather than as an empty Spark read.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from plateau import protocol

JVM_SOURCES = Path(__file__).resolve().parents[2] / "jvm" / "src"

_STRING_CONSTANT = re.compile(r'static\s+final\s+String\s+(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"\s*;')
_NUMBER_CONSTANT = re.compile(r"static\s+final\s+(?:int|long)\s+(\w*PAGE\w*)\s*=\s*([\d_]+)L?\s*;")
_LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')
_READ_HEADER = re.compile(r'firstValue\(\s*"([^"]+)"\s*\)')
_SENT_HEADER = re.compile(r'\.header\(\s*"([^"]+)"\s*,\s*(\w+|"[^"]*")')

MEDIA_TYPES = {
    name: value
    for name, value in vars(protocol).items()
    if name.isupper() and isinstance(value, str) and "/" in value
}
HEADERS = {name: value for name, value in vars(protocol).items() if name.endswith("_HEADER")}


def java_text() -> str:
    files = sorted(JVM_SOURCES.rglob("*.java"))
    assert files, f"no Java sources under {JVM_SOURCES}"
    return "\n".join(path.read_text() for path in files)


def test_the_protocol_module_is_import_light() -> None:
    """Every layer imports it, so it must not pull in the node's heavy dependencies."""
    source = Path(protocol.__file__).read_text()
    assert not re.search(r"^\s*(import|from)\s+(?!__future__)", source, re.M)


def test_java_string_constants_equal_the_protocol() -> None:
    """A Java constant named like a protocol name holds the protocol's value."""
    constants = dict(_STRING_CONSTANT.findall(java_text()))
    shared = {name for name in constants if hasattr(protocol, name)}
    assert "ARROW_FILE" in shared  # the reader asks for Arrow files
    for name in shared:
        assert constants[name] == getattr(protocol, name), name


def test_java_page_size_constants_equal_the_protocol() -> None:
    for name, value in _NUMBER_CONSTANT.findall(java_text()):
        assert hasattr(protocol, name), f"{name}: a page size plateau.protocol does not name"
        assert int(value.replace("_", "")) == getattr(protocol, name), name


def test_every_media_type_the_jvm_spells_is_the_protocols() -> None:
    spelled = {s for s in _LITERAL.findall(java_text()) if s.startswith("application/")}
    assert spelled, "the JVM reader names no media type"
    assert spelled <= set(MEDIA_TYPES.values()), spelled - set(MEDIA_TYPES.values())


def test_every_x_header_the_jvm_spells_is_the_protocols() -> None:
    spelled = {s.lower() for s in _LITERAL.findall(java_text()) if s.lower().startswith("x-")}
    assert spelled <= set(HEADERS.values()), spelled - set(HEADERS.values())


def test_the_jvm_reads_the_span_headers_the_node_sends() -> None:
    """The JVM pages by the span headers; a rename on either side would stall its reads."""
    read = {h.lower() for h in _READ_HEADER.findall(java_text())}
    assert {protocol.SPAN_START_HEADER, protocol.SPAN_END_HEADER} <= read


def test_the_jvm_accepts_arrow_files() -> None:
    sent = {name.lower(): value for name, value in _SENT_HEADER.findall(java_text())}
    constants = dict(_STRING_CONSTANT.findall(java_text()))
    accept = sent.get("accept", "")
    value = accept.strip('"') if accept.startswith('"') else constants.get(accept)
    assert value == protocol.ARROW_FILE


def test_the_jvm_reads_the_partition_records_path() -> None:
    """``uri.append("/topic/")...append("/records?...")``: the segments between the names."""
    source = (JVM_SOURCES / "io" / "plateau" / "spark" / "NodeClient.java").read_text()
    segments = [s.split("?", 1)[0] for s in re.findall(r'\.append\("(/[^"]*)"\)', source)]
    built = segments[0] + "{topic}" + segments[1] + "{partition}" + segments[2]
    assert built == protocol.READ_PARTITION_PATH


@pytest.mark.parametrize(
    ("java", "ok"),
    [
        (f'static final String ARROW_FILE = "{protocol.ARROW_FILE}";', True),
        (f'static final String ARROW_FILE = "{protocol.ARROW_STREAM}";', False),
    ],
)
def test_the_parser_sees_a_changed_constant(java: str, ok: bool) -> None:
    """The regex reads what a Java declaration holds (so a drift cannot slip past it)."""
    (name, value), *_ = _STRING_CONSTANT.findall(java)
    assert (value == getattr(protocol, name)) is ok
