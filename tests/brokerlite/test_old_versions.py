"""The request versions Kafka 4.0 removed (KIP-896), served by default (issue #37).

Sans-IO: every request goes through the real codec both ways (``Core``), so the
answers are also proven encodable at their old versions. The message-format
conversions are checked on their own first, then through Produce v0-2 and
Fetch v0-3, then the group and offset APIs old consumers use. What real old
clients make of it is in ``test_interop_old_clients.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from brokerlite_wire import create, produce_request

from trafka.brokerlite.errors import CorruptRecordError, InvalidRecordError
from trafka.brokerlite.outcomes import Parked
from trafka.brokerlite.storage.message_format import down_convert, fetch_magic, up_convert
from trafka.codec.compression import Compression
from trafka.codec.errors import ErrorCode
from trafka.codec.legacy import encode_message_set
from trafka.codec.messages import k01_fetch as fetch
from trafka.codec.messages import k02_list_offsets as list_offsets
from trafka.codec.messages import k08_offset_commit as offset_commit
from trafka.codec.messages import k09_offset_fetch as offset_fetch
from trafka.codec.messages import k11_join_group as join_group
from trafka.codec.messages import k14_sync_group as sync_group
from trafka.codec.messages import k32_describe_configs as describe_configs
from trafka.codec.records import (
    ControlRecordType,
    TimestampType,
    decode_batch,
    decode_message_set,
    decode_records,
    encode_batch,
    iter_batches,
    read_batch_header,
)

T0 = 1_700_000_000_000


def legacy_set(
    values: list[bytes], *, magic: int, compression: int = 0, keys: list[bytes] | None = None
) -> bytes:
    keys = keys or [b"k%d" % i for i in range(len(values))]
    return encode_message_set(
        [(T0 + i, k, v, ()) for i, (k, v) in enumerate(zip(keys, values, strict=True))],
        magic=magic,
        compression=compression,
    )


# -- the conversions ---------------------------------------------------------------------------


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [0, 1, 2, 3])
def test_up_convert_keeps_every_record(magic: int, codec: int) -> None:
    batch = up_convert(legacy_set([b"a", b"b", b"c"], magic=magic, compression=codec))
    header = read_batch_header(batch)
    assert header.magic == 2
    assert header.compression == codec
    assert header.producer_id == -1
    assert header.timestamp_type == TimestampType.CREATE_TIME
    records = decode_batch(batch).records
    assert [(r.offset, r.key, r.value) for r in records] == [
        (0, b"k0", b"a"),
        (1, b"k1", b"b"),
        (2, b"k2", b"c"),
    ]
    # Magic 0 has no timestamps: stored as -1, as Kafka stores them.
    want = [-1, -1, -1] if magic == 0 else [T0, T0 + 1, T0 + 2]
    assert [r.timestamp for r in records] == want


def test_up_convert_takes_several_entries_into_one_batch() -> None:
    blob = legacy_set([b"a"], magic=1) + legacy_set([b"b", b"c"], magic=1, compression=1)
    batch = up_convert(blob)
    assert [r.value for r in decode_batch(batch).records] == [b"a", b"b", b"c"]
    assert read_batch_header(batch).compression == Compression.GZIP


def test_up_convert_refuses_bad_sets() -> None:
    good = legacy_set([b"a", b"b"], magic=1)
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF  # the value of the last message: its CRC no longer matches
    with pytest.raises(CorruptRecordError, match="legacy message set"):
        up_convert(bytes(corrupt))
    with pytest.raises(CorruptRecordError, match="trailing bytes"):
        up_convert(good[:-3])
    with pytest.raises(InvalidRecordError, match="magic 2"):
        up_convert(good + encode_batch([(T0, None, b"x", ())]))


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_down_convert_keeps_offsets_and_values(magic: int, codec: int) -> None:
    first = encode_batch(
        [(T0, b"k0", b"a", (("h", b"v"),)), (T0 + 1, None, b"b", ())],
        base_offset=10,
        compression=codec,
    )
    second = encode_batch([(T0 + 5, b"k2", None, ())], base_offset=12, compression=codec)
    out = down_convert(first + second, magic, fetch_offset=10)
    assert {h.magic for h, _ in iter_batches(out)} == {magic}
    records = decode_message_set(out)
    assert [(r.offset, r.key, r.value, r.headers) for r in records] == [
        (10, b"k0", b"a", ()),
        (11, None, b"b", ()),
        (12, b"k2", None, ()),
    ]
    want = [-1, -1, -1] if magic == 0 else [T0, T0 + 1, T0 + 5]
    assert [r.timestamp for r in records] == want
    if codec in (1, 2, 3):  # zstd has no legacy form: those come uncompressed
        assert {h.compression for h, _ in iter_batches(out)} == {codec}
    else:
        assert {h.compression for h, _ in iter_batches(out)} == {0}


def test_down_convert_leaves_out_control_batches_and_earlier_records() -> None:
    data = encode_batch([(T0, None, b"a", ()), (T0, None, b"b", ())], base_offset=0)
    marker = encode_batch(
        [(T0, bytes([0, 0, 0, ControlRecordType.COMMIT]), b"\0\0\0\0\0\0", ())],
        base_offset=2,
        producer_id=7,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
    )
    out = down_convert(data + marker, 1, fetch_offset=1)
    assert [(r.offset, r.value) for r in decode_message_set(out)] == [(1, b"b")]
    assert down_convert(marker, 0, fetch_offset=2) == b""


def test_down_convert_keeps_log_append_time_in_magic_1() -> None:
    batch = encode_batch([(T0, None, b"a", ())], timestamp_type=1, base_timestamp=T0)
    out = down_convert(batch, 1, fetch_offset=0)
    (header, _), *_ = iter_batches(out)
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME


def test_fetch_magic_by_version() -> None:
    assert [fetch_magic(v) for v in range(6)] == [0, 0, 1, 1, 2, 2]


# -- Produce v0-2 and Fetch v0-3 -------------------------------------------------------------


def old_fetch(topic: str, offset: int = 0, partition_max_bytes: int = 1 << 20) -> Any:
    return fetch.FetchRequest(
        max_wait_ms=0,
        min_bytes=1,
        topics=[
            fetch.FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    fetch.FetchRequest.FetchPartition(
                        partition=0, fetch_offset=offset, partition_max_bytes=partition_max_bytes
                    )
                ],
            )
        ],
    )


@pytest.mark.parametrize(("produce_version", "magic"), [(0, 0), (1, 0), (2, 1)])
def test_old_produce_is_stored_as_batches_and_read_back_by_every_fetch(
    core: Any, produce_version: int, magic: int
) -> None:
    create(core, "old")
    blob = legacy_set([b"a", b"b"], magic=magic, compression=1)
    answer = core.call(0, produce_version, produce_request("old", blob, acks=1))
    part = answer.responses[0].partition_responses[0]
    assert (part.error_code, part.base_offset) == (0, 0)
    blob = legacy_set([b"c"], magic=magic)
    answer = core.call(0, produce_version, produce_request("old", blob, acks=1))
    assert answer.responses[0].partition_responses[0].base_offset == 2

    # The log holds magic 2 batches: a modern consumer reads them as any other.
    modern = core.call(
        1,
        12,
        fetch.FetchRequest(
            max_wait_ms=0,
            topics=[
                fetch.FetchRequest.FetchTopic(
                    topic="old",
                    partitions=[
                        fetch.FetchRequest.FetchPartition(partition=0, partition_max_bytes=1 << 20)
                    ],
                )
            ],
        ),
    )
    records = modern.responses[0].partitions[0].records
    assert {h.magic for h, _ in iter_batches(records)} == {2}
    assert [(r.offset, r.value) for r in decode_records(records)] == [
        (0, b"a"),
        (1, b"b"),
        (2, b"c"),
    ]

    # Each old Fetch gets the message format it reads.
    for version in range(4):
        answer = core.call(1, version, old_fetch("old", offset=1))
        part = answer.responses[0].partitions[0]
        assert (part.error_code, part.high_watermark) == (0, 3)
        entries = list(iter_batches(part.records))
        assert {h.magic for h, _ in entries} == {fetch_magic(version)}
        values = [(r.offset, r.value) for r in decode_message_set(part.records)]
        # The compressed wrapper comes whole (offsets 0-1); the client skips offset 0.
        assert values == [(0, b"a"), (1, b"b"), (2, b"c")], version


def test_modern_records_reach_old_fetches(core: Any) -> None:
    create(core, "modern")
    batch = encode_batch([(T0, b"k", b"v1", (("h", b"x"),)), (T0 + 1, None, b"v2", ())])
    assert (
        core.call(0, 9, produce_request("modern", batch))
        .responses[0]
        .partition_responses[0]
        .error_code
        == 0
    )
    answer = core.call(1, 2, old_fetch("modern"))
    records = decode_message_set(answer.responses[0].partitions[0].records)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in records] == [
        (0, T0, b"k", b"v1"),
        (1, T0 + 1, None, b"v2"),
    ]


def test_old_produce_on_a_log_append_time_topic(core: Any) -> None:
    create(core, "lat", **{"message.timestamp.type": "LogAppendTime"})
    answer = core.call(0, 2, produce_request("lat", legacy_set([b"a"], magic=1), acks=1))
    part = answer.responses[0].partition_responses[0]
    assert part.error_code == 0
    assert part.log_append_time_ms == core.now
    answer = core.call(1, 3, old_fetch("lat"))
    (header, _), *_ = iter_batches(answer.responses[0].partitions[0].records)
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert header.timestamp == core.now


def test_old_produce_errors_are_per_partition(core: Any) -> None:
    create(core, "bad")
    corrupt = bytearray(legacy_set([b"a"], magic=1))
    corrupt[-1] ^= 1
    answer = core.call(0, 2, produce_request("bad", bytes(corrupt), acks=1))
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.CORRUPT_MESSAGE
    answer = core.call(0, 2, produce_request("nowhere", legacy_set([b"a"], magic=1), acks=1))
    part = answer.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # A v3+ request must carry magic 2, as in Kafka.
    answer = core.call(0, 3, produce_request("bad", legacy_set([b"a"], magic=1), acks=1))
    assert answer.responses[0].partition_responses[0].error_code != ErrorCode.NONE


# -- ListOffsets v0 ----------------------------------------------------------------------------


def test_list_offsets_v0_answers_the_old_offsets_array(core: Any) -> None:
    create(core, "lo")
    core.call(0, 2, produce_request("lo", legacy_set([b"a", b"b"], magic=1), acks=1))

    def ask(timestamp: int, max_num: int = 1) -> list[int]:
        request = list_offsets.ListOffsetsRequest(
            replica_id=-1,
            topics=[
                list_offsets.ListOffsetsRequest.ListOffsetsTopic(
                    name="lo",
                    partitions=[
                        list_offsets.ListOffsetsRequest.ListOffsetsPartition(
                            partition_index=0, timestamp=timestamp, max_num_offsets=max_num
                        )
                    ],
                )
            ],
        )
        part = core.call(2, 0, request).topics[0].partitions[0]
        assert part.error_code == 0
        return list(part.old_style_offsets)

    assert ask(-1) == [2]
    assert ask(-2) == [0]
    assert ask(T0 + 1) == [1]
    assert ask(T0 + 99) == []
    assert ask(-1, max_num=0) == []


# -- groups and offsets ---------------------------------------------------------------------


def test_join_group_v0_and_v1_then_commit_v1_and_fetch_v0(core: Any) -> None:
    create(core, "gt")
    protocols = [join_group.JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"m")]
    for version in (0, 1):
        group = f"old-group-{version}"
        join = join_group.JoinGroupRequest(
            group_id=group,
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            member_id="",
            protocol_type="consumer",
            protocols=protocols,
        )
        # v0-1 have no member-id-required step (KIP-394 is v4+): the first join
        # joins, once the join phase ends.
        outcome = core.send(11, version, join, conn_id=3)
        if isinstance(outcome, Parked):
            [done] = [c for c in core.poll(1) if c.conn_id == 3]
            answer = core.decode(done.reply)
        else:
            answer = core.decode(outcome)
        assert answer.error_code == 0, answer
        assert answer.generation_id == 1
        assert answer.leader == answer.member_id != ""
        member = answer.member_id
        synced = core.call(
            14,
            0,
            sync_group.SyncGroupRequest(
                group_id=group,
                generation_id=1,
                member_id=member,
                assignments=[
                    sync_group.SyncGroupRequest.SyncGroupRequestAssignment(
                        member_id=member, assignment=b"assignment"
                    )
                ],
            ),
        )
        assert (synced.error_code, synced.assignment) == (0, b"assignment")
        commit = offset_commit.OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=1,
            member_id=member,
            topics=[
                offset_commit.OffsetCommitRequest.OffsetCommitRequestTopic(
                    name="gt",
                    partitions=[
                        offset_commit.OffsetCommitRequest.OffsetCommitRequestPartition(
                            partition_index=0, committed_offset=42, committed_metadata="md"
                        )
                    ],
                )
            ],
        )
        answer = core.call(8, 1, commit)
        assert answer.topics[0].partitions[0].error_code == 0
        fetched = core.call(
            9,
            0,
            offset_fetch.OffsetFetchRequest(
                group_id=group,
                topics=[
                    offset_fetch.OffsetFetchRequest.OffsetFetchRequestTopic(
                        name="gt", partition_indexes=[0]
                    )
                ],
            ),
        )
        part = fetched.topics[0].partitions[0]
        assert (part.error_code, part.committed_offset, part.metadata) == (0, 42, "md")


def test_offset_commit_v0_is_a_standalone_commit(core: Any) -> None:
    create(core, "sa")
    commit = offset_commit.OffsetCommitRequest(
        group_id="standalone",
        topics=[
            offset_commit.OffsetCommitRequest.OffsetCommitRequestTopic(
                name="sa",
                partitions=[
                    offset_commit.OffsetCommitRequest.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=7
                    )
                ],
            )
        ],
    )
    assert core.call(8, 0, commit).topics[0].partitions[0].error_code == 0
    fetched = core.call(
        9,
        1,
        offset_fetch.OffsetFetchRequest(
            group_id="standalone",
            topics=[
                offset_fetch.OffsetFetchRequest.OffsetFetchRequestTopic(
                    name="sa", partition_indexes=[0]
                )
            ],
        ),
    )
    assert fetched.topics[0].partitions[0].committed_offset == 7


def test_describe_configs_v0_says_which_values_are_defaults(core: Any) -> None:
    create(core, "dc", **{"retention.ms": "1000"})
    request = describe_configs.DescribeConfigsRequest(
        resources=[
            describe_configs.DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=2, resource_name="dc", configuration_keys=None
            )
        ]
    )
    entries = {e.name: e for e in core.call(32, 0, request).results[0].configs}
    assert entries["retention.ms"].is_default is False
    assert entries["retention.ms"].value == "1000"
    assert entries["segment.bytes"].is_default is True


def test_protocol_4_0_refuses_what_kip_896_removed(open_core: Any) -> None:
    core = open_core(protocol_version="4.0")
    create(core, "strict")
    answer = core.call(0, 2, produce_request("strict", legacy_set([b"a"], magic=1), acks=1))
    part = answer.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.UNSUPPORTED_VERSION
    answer = core.call(1, 3, old_fetch("strict"))
    assert answer.responses[0].partitions[0].error_code == ErrorCode.UNSUPPORTED_VERSION
    join = join_group.JoinGroupRequest(group_id="g", protocol_type="consumer")
    assert core.call(11, 1, join).error_code == ErrorCode.UNSUPPORTED_VERSION
