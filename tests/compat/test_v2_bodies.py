"""Bodies as the v2 clients read them: compressed ones re-framed as gzip, MD5 digests."""

from __future__ import annotations

import gzip
import hashlib
import zlib

from pocketmq.broker.grpc_v2.convert import body_for_clients, message_pb
from pocketmq.common.message import HostAddress, StoredMessage, SysFlag
from pocketmq.rmqv2 import definition_pb2 as d

PLAIN = b"order 1 paid; " * 500
HOST: HostAddress = ("127.0.0.1", 10911)


def stored(body: bytes, sysflag: int = 0) -> StoredMessage:
    return StoredMessage(
        total_size=0,
        queue_id=0,
        flag=0,
        queue_offset=0,
        phys_offset=0,
        sysflag=sysflag,
        born_timestamp_ms=0,
        born_host=HOST,
        store_timestamp_ms=0,
        store_host=HOST,
        reconsume_times=0,
        prepared_transaction_offset=0,
        body=body,
        topic="T",
        properties={"UNIQ_KEY": "ID1"},
    )


def test_a_zlib_compressed_body_goes_out_as_gzip_of_the_same_deflate_data():
    packed = zlib.compress(PLAIN, 5)

    body, encoding = body_for_clients(stored(packed, SysFlag.COMPRESSED))

    assert encoding == d.GZIP
    assert gzip.decompress(body) == PLAIN
    assert body[10:-8] == packed[2:-4]  # re-framed, not recompressed


def test_a_plain_body_and_a_gzip_body_go_out_as_stored():
    zipped = gzip.compress(PLAIN)
    assert body_for_clients(stored(PLAIN)) == (PLAIN, d.IDENTITY)
    assert body_for_clients(stored(zipped, SysFlag.COMPRESSED)) == (zipped, d.GZIP)


def test_a_compressed_body_that_is_no_whole_zlib_stream_goes_out_as_stored():
    packed = zlib.compress(PLAIN)
    for broken in (packed[:-10], packed + b"tail", b"not zlib at all"):
        assert body_for_clients(stored(broken, SysFlag.COMPRESSED)) == (broken, d.GZIP)


def test_the_digest_is_the_uppercase_md5_of_the_body_as_sent():
    for msg in (stored(PLAIN), stored(zlib.compress(PLAIN), SysFlag.COMPRESSED)):
        pb = message_pb(msg)
        digest = pb.system_properties.body_digest
        assert digest.type == d.MD5
        assert digest.checksum == hashlib.md5(pb.body).hexdigest().upper()
