"""SendResults: a send_batch's results, one per message, made when read."""

from __future__ import annotations

import copy
import pickle

import pytest

from pocketmq.client.model import MessageQueue, SendResult, SendResults, SendStatus
from pocketmq.common.msgid import UniqueIdBlock

QUEUE = MessageQueue("t", "broker-a", 3)
PREFIX = "7F00000100002A9F"  # store IP and port, as a broker answers it


def results(n: int = 3, status: SendStatus = SendStatus.SEND_OK) -> SendResults:
    return SendResults(
        status,
        QUEUE,
        [f"ID{i}" for i in range(n)],
        PREFIX,
        [10 + i for i in range(n)],
        [4096 * i for i in range(n)],
    )


def expected(i: int) -> SendResult:
    return SendResult(
        status=SendStatus.SEND_OK,
        msg_id=f"ID{i}",
        offset_msg_id=f"{PREFIX}{4096 * i:016X}",
        queue=QUEUE,
        queue_offset=10 + i,
    )


def test_each_result_reads_as_the_send_result_of_its_message():
    got = results()
    assert len(got) == 3
    assert [got[0], got[1], got[2]] == [expected(0), expected(1), expected(2)]
    assert got[-1] == expected(2)
    assert list(got) == [expected(i) for i in range(3)]
    assert got[1:] == [expected(1), expected(2)]


def test_results_equal_a_list_of_the_same_results_and_nothing_else():
    got = results()
    assert got == [expected(0), expected(1), expected(2)]
    assert got == tuple(expected(i) for i in range(3))
    assert got != [expected(0), expected(1)]
    assert got != [expected(0), expected(2), expected(1)]
    assert got != "abc"
    assert "SendResults([SendResult(" in repr(got)


def test_results_give_the_batchs_one_status():
    got = results(status=SendStatus.FLUSH_DISK_TIMEOUT)
    assert got.status is SendStatus.FLUSH_DISK_TIMEOUT
    assert {r.status for r in got} == {SendStatus.FLUSH_DISK_TIMEOUT}


def test_reading_past_the_end_raises_index_error():
    got = results()
    with pytest.raises(IndexError, match="result 3 of a batch of 3"):
        got[3]
    with pytest.raises(IndexError):
        got[-4]


def test_columns_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match="one each per message"):
        SendResults(SendStatus.SEND_OK, QUEUE, ["a", "b"], PREFIX, [1], [2, 3])


def test_results_read_their_ids_from_a_block_of_ids():
    block = UniqueIdBlock("AB" * 14, 0xFFFE, 3)
    got = SendResults(SendStatus.SEND_OK, QUEUE, block, PREFIX, [0, 1, 2], [0, 1, 2])
    assert [r.msg_id for r in got] == ["AB" * 14 + "FFFE", "AB" * 14 + "FFFF", "AB" * 14 + "0000"]


def test_results_pickle_and_copy_as_the_list_of_their_results():
    got = results()
    assert pickle.loads(pickle.dumps(got)) == list(got)
    assert copy.copy(got) == list(got)
