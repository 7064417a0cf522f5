"""The record layout has one definition: ``common/record_layout.py``.

Its drawing, its declared fields, the records the encoders build and the
``#define`` blocks of the three C accelerators all agree with it. The C files
are read as text (no compiler needed): every layout number they define is
evaluated and compared with the value the Python module derives.
"""

from __future__ import annotations

import ast
import operator
import re
from pathlib import Path

import pytest

from pocketmq.broker.store.consume_queue import CQ_UNIT
from pocketmq.broker.store.index_file import HASH_SLOT, INDEX_ENTRY, INDEX_HEADER
from pocketmq.client.message_codec import STORE_HOST_PLACEHOLDER, ZLIB_LEVEL
from pocketmq.common import record_layout as layout
from pocketmq.common.message import decode_record, encode_record, pack_host
from pocketmq.common.record_layout import (
    BLANK_HEAD,
    FIELD_STRUCT,
    FIXED_FIELDS,
    FIXED_SIZE_V4,
    FIXED_V4,
    HEAD,
    HOST_V4_SIZE,
    HOST_V6_SIZE,
    MAX_PROPERTIES_LENGTH,
    MAX_TOPIC_LENGTH_V1,
    STORE_TIMESTAMP,
    TAIL_AFTER_STOREHOST,
    SysFlag,
    field_offset,
    host_positions,
    host_sysflag,
    record_size,
)
from pocketmq.common.validation import MAX_TOPIC_LENGTH

ROOT = Path(__file__).resolve().parents[2]
C_SOURCES = ("broker/store/_speedups.c", "client/_codec.c", "spark/_arrowcodec.c")
#: the record's fields, shared by the three (each includes it)
C_LAYOUT_HEADER = "common/csrc/pmq_record_layout.h"
HOST4 = pack_host(("10.0.0.1", 1))
HOST6 = pack_host(("::1", 2))
V4 = host_positions(0)

#: every layout number a C file may define, as the Python modules derive it
EXPECTED = {
    "HEAD_SIZE": HEAD.size,
    "POS_TOTALSIZE": layout.POS_TOTALSIZE,
    "POS_MAGIC": layout.POS_MAGIC,
    "POS_BODYCRC": layout.POS_BODYCRC,
    "POS_QUEUEID": layout.POS_QUEUEID,
    "POS_FLAG": layout.POS_FLAG,
    "POS_QUEUEOFFSET": layout.POS_QUEUEOFFSET,
    "POS_PHYSICALOFFSET": layout.POS_PHYSICALOFFSET,
    "POS_SYSFLAG": layout.POS_SYSFLAG,
    "POS_BORNTIMESTAMP": layout.POS_BORNTIMESTAMP,
    "POS_BORNHOST": layout.POS_BORNHOST,
    "HOST_V4_SIZE": HOST_V4_SIZE,
    "HOST_V6_SIZE": HOST_V6_SIZE,
    "STORE_TIMESTAMP_SIZE": STORE_TIMESTAMP.size,
    # C's TAIL_AFTER_STOREHOST stops before BODYLEN (RECONSUMETIMES, PREPARED...OFFSET)
    "TAIL_AFTER_STOREHOST": V4.body_len - V4.reconsume_times,
    "BODYLEN_SIZE": FIELD_STRUCT["BODYLEN"].size,
    "FIXED_V4_SIZE": FIXED_V4.size,
    "STORE_HOST_PLACEHOLDER_SIZE": len(STORE_HOST_PLACEHOLDER),
    "MESSAGE_MAGIC_CODE": layout.MESSAGE_MAGIC_CODE,
    "MESSAGE_MAGIC_CODE_V2": layout.MESSAGE_MAGIC_CODE_V2,
    "BLANK_MAGIC_CODE": layout.BLANK_MAGIC_CODE,
    "END_FILE_MIN_BLANK_LENGTH": BLANK_HEAD.size,
    "SYSFLAG_COMPRESSED": SysFlag.COMPRESSED,
    "SYSFLAG_BORNHOST_V6": SysFlag.BORNHOST_V6,
    "SYSFLAG_STOREHOST_V6": SysFlag.STOREHOST_V6,
    "SYSFLAG_TRANSACTION_MASK": SysFlag.TRANSACTION_MASK,
    "SYSFLAG_TRANSACTION_PREPARED": SysFlag.TRANSACTION_PREPARED,
    "SYSFLAG_TRANSACTION_ROLLBACK": SysFlag.TRANSACTION_ROLLBACK,
    "MAX_PROPERTIES_LENGTH": MAX_PROPERTIES_LENGTH,
    "MAX_TOPIC_LENGTH_V1": MAX_TOPIC_LENGTH_V1,
    "MAX_TOPIC_LENGTH": MAX_TOPIC_LENGTH,  # a topic name's characters (common/validation.py)
    "ZLIB_LEVEL": ZLIB_LEVEL,
    "CQ_UNIT_SIZE": CQ_UNIT.size,
    "INDEX_HEADER_SIZE": INDEX_HEADER.size,
    "HASH_SLOT_SIZE": HASH_SLOT.size,
    "INDEX_ENTRY_SIZE": INDEX_ENTRY.size,
}
#: where a file gives a name another meaning
EXPECTED_IN = {"client/_codec.c": {"MAX_TOPIC_LENGTH": MAX_TOPIC_LENGTH_V1}}  # a record's bytes
#: a define with such a name is a layout number and must be in EXPECTED
LAYOUT_NAME = re.compile(
    r"(HEAD_|POS_|HOST_|TAIL_|BODYLEN|FIXED_|STORE_(TIMESTAMP|HOST)|\w*MAGIC_CODE|SYSFLAG_"
    r"|MAX_\w*LENGTH|CQ_|INDEX_|HASH_SLOT|END_FILE)"
)
_DEFINE = re.compile(r"^#define\s+([A-Z_][A-Z0-9_]*)[ \t]+(.+)$")
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def c_defines(source: str) -> dict[str, str]:
    """``#define NAME text`` of a C file, continued lines joined, comments dropped."""
    text = re.sub(r"/\*.*?\*/", " ", source.replace("\\\n", " "), flags=re.S)
    out = {}
    for line in text.splitlines():
        m = _DEFINE.match(line.strip())
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def c_value(text: str, defines: dict[str, str]) -> int:
    """The integer a define's text stands for: literals (0x..u), + - * and other defines."""

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name) and node.id in defines:
            return c_value(defines[node.id], defines)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        raise ValueError(f"not a layout number: {ast.unparse(node)}")

    python = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]+\b", r"\1", text)
    return ev(ast.parse(python, mode="eval").body)


def c_source_with_layout(path: str) -> str:
    """A C file's text with the shared layout header put where the file includes it."""
    source = (ROOT / path).read_text()
    include = f'#include "{Path(C_LAYOUT_HEADER).name}"'
    assert include in source, f"{path} does not include {C_LAYOUT_HEADER}"
    return source.replace(include, (ROOT / C_LAYOUT_HEADER).read_text())


@pytest.mark.parametrize("path", C_SOURCES)
def test_a_c_accelerator_takes_the_record_fields_from_the_shared_header_alone(path):
    shared = set(c_defines((ROOT / C_LAYOUT_HEADER).read_text()))
    own = set(c_defines((ROOT / path).read_text()))
    assert not shared & own, f"{path} defines {sorted(shared & own)} again"


@pytest.mark.parametrize("path", C_SOURCES)
def test_every_layout_number_of_a_c_accelerator_matches_record_layout(path):
    defines = c_defines(c_source_with_layout(path))
    layout_names = [name for name in defines if LAYOUT_NAME.match(name)]
    assert {"HEAD_SIZE", "HOST_V4_SIZE", "MESSAGE_MAGIC_CODE"} <= set(layout_names)
    unknown = [name for name in layout_names if name not in EXPECTED]
    assert not unknown, f"{path} defines {unknown}: derive them in common/record_layout.py"
    expected = {**EXPECTED, **EXPECTED_IN.get(path, {})}
    wrong = {
        name: (c_value(defines[name], defines), expected[name])
        for name in layout_names
        if c_value(defines[name], defines) != expected[name]
    }
    assert not wrong, f"{path}: (C, Python) values differ: {wrong}"


def test_the_c_define_reader_evaluates_what_the_blocks_use():
    defines = c_defines("#define A 0xDAA320A7u /* x */\n#define B (A - 1 + 2 * \\\n 3)\n")
    assert c_value(defines["B"], defines) == 0xDAA320A7 + 5
    with pytest.raises(ValueError, match="not a layout number"):
        c_value("(INT64_MAX / 1000)", defines)


def drawn_rows() -> list[tuple[str, str, str]]:
    """(offset, size, field) of each row of the drawing in record_layout's docstring."""
    rows = []
    for line in (layout.__doc__ or "").splitlines():
        m = re.match(r"^\s+([0-9.][0-9+BS]*)\s+([0-9|]+)\s+([A-Z]+)\b", line)
        if m:
            rows.append((m.group(1), m.group(2), m.group(3)))
    return rows


def test_the_drawing_shows_the_declared_fields_at_their_offsets_and_sizes():
    rows = drawn_rows()[: len(FIXED_FIELDS)]
    assert [field for _, _, field in rows] == [f.name for f in FIXED_FIELDS]
    for offset, size, field in rows:
        if field in ("BORNHOST", "STOREHOST"):
            assert size == f"{HOST_V4_SIZE}|{HOST_V6_SIZE}"
        else:
            assert int(size) == FIELD_STRUCT[field].size, field
        for born in (HOST_V4_SIZE, HOST_V6_SIZE):
            for store in (HOST_V4_SIZE, HOST_V6_SIZE):
                hosts = {"B": str(born), "S": str(store)}
                assert c_value(offset, hosts) == field_offset(field, born, store), field


def test_offsets_move_with_the_host_sizes_the_sysflag_announces():
    for born, store in ((HOST4, HOST4), (HOST6, HOST4), (HOST4, HOST6), (HOST6, HOST6)):
        record = encode_record(
            topic="T",
            body=b"body",
            born_host=born,
            store_host=store,
            store_timestamp_ms=1234,
            reconsume_times=5,
            prepared_transaction_offset=6,
        )
        sysflag = FIELD_STRUCT["SYSFLAG"].unpack_from(record, layout.POS_SYSFLAG)[0]
        at = host_positions(sysflag)
        assert (at.born_host_size, at.store_host_size) == (len(born), len(store))
        assert record[layout.POS_BORNHOST : at.store_timestamp] == born
        assert STORE_TIMESTAMP.unpack_from(record, at.store_timestamp)[0] == 1234
        assert record[at.store_host : at.reconsume_times] == store
        assert TAIL_AFTER_STOREHOST.unpack_from(record, at.reconsume_times) == (5, 6, 4)
        assert record[at.body : at.body + 4] == b"body"
        assert len(record) == record_size(
            4, 1, 0, born_host_size=len(born), store_host_size=len(store)
        )


def test_an_ipv4_record_has_91_fixed_bytes():
    assert FIXED_SIZE_V4 == 91
    assert len(encode_record(topic="", body=b"")) == 91


def test_encode_record_takes_the_host_bits_from_the_hosts_not_the_caller():
    stale = SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6 | SysFlag.COMPRESSED
    v4 = decode_record(
        encode_record(topic="T", body=b"x", sysflag=stale, born_host=HOST4, store_host=HOST4)
    )
    assert v4.sysflag == SysFlag.COMPRESSED
    v6 = decode_record(encode_record(topic="T", body=b"x", born_host=HOST6, store_host=HOST4))
    assert v6.sysflag == host_sysflag(HOST6, HOST4) == SysFlag.BORNHOST_V6
