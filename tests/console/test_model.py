"""The console's model without a cluster or a browser: views built from
hand-made admin answers, what a person types parsed or refused, bytes shown as
text, JSON or hex, and the lag history and its chart."""

from __future__ import annotations

import uuid

import pytest

from trafka.codec import ErrorCode, KafkaError
from trafka.console import model
from trafka.console.model import InputError, LagHistory, render_bytes
from trafka.sdk.acls import AclOperation, AclPermissionType, AclResourceType, PatternType
from trafka.sdk.admin import (
    ClusterDescription,
    GroupDescription,
    GroupListing,
    LogDirDescription,
    MemberDescription,
)
from trafka.sdk.fetcher import TopicPartition as TP
from trafka.sdk.metadata import BrokerInfo, PartitionInfo, TopicInfo


def topic(name: str, *parts: tuple[int, tuple[int, ...], tuple[int, ...]]) -> TopicInfo:
    return TopicInfo(
        name,
        uuid.UUID(int=1),
        name.startswith("__"),
        tuple(
            PartitionInfo(name, i, leader, 3, replicas, isr)
            for i, (leader, replicas, isr) in enumerate(parts)
        ),
    )


CLUSTER = ClusterDescription("c1", 2, (BrokerInfo(2, "h2", 9093), BrokerInfo(1, "h1", 9092, "r1")))
TOPICS = {
    "a": topic("a", (1, (1, 2), (1, 2)), (2, (2, 1), (2,))),
    "b": topic("b", (-1, (1,), ())),
    "__consumer_offsets": topic("__consumer_offsets", (1, (1, 2), (1, 2))),
}


def test_overview_counts_leaders_replicas_and_trouble() -> None:
    view = model.overview(CLUSTER, TOPICS)
    assert [b.node_id for b in view.brokers] == [1, 2]
    b1, b2 = view.brokers
    assert (b1.is_controller, b1.leaders, b1.replicas, b1.rack) == (False, 2, 4, "r1")
    assert (b2.is_controller, b2.leaders, b2.replicas) == (True, 1, 3)
    assert (view.topics, view.partitions, view.under_replicated, view.offline) == (3, 4, 2, 1)
    assert b1.data_bytes is None and b1.usable_bytes is None  # no log dirs given


def test_overview_disks_from_log_dirs() -> None:
    dirs = [
        LogDirDescription(1, "/a", None, {TP("a", 0): 100, TP("a", 1): 20}, 1000, 400),
        LogDirDescription(1, "/b", None, {TP("b", 0): 5}, 500, 100),
        LogDirDescription(1, "/c", KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, "x"), {}),
        LogDirDescription(2, "/a", None, {TP("a", 0): 100}),  # before v4: no disk sizes
    ]
    b1, b2 = model.overview(CLUSTER, TOPICS, dirs).brokers
    assert (b1.data_bytes, b1.usable_bytes, b1.total_bytes, b1.offline_dirs) == (125, 500, 1500, 1)
    assert (b2.data_bytes, b2.usable_bytes, b2.total_bytes, b2.offline_dirs) == (100, None, None, 0)


def test_topic_rows_sum_offsets_and_sizes() -> None:
    starts = {TP("a", 0): (5, -1), TP("a", 1): (0, -1), TP("b", 0): (0, -1)}
    ends = {TP("a", 0): (15, -1), TP("a", 1): (7, -1), TP("b", 0): None}
    dirs = [
        LogDirDescription(1, "/d1", None, {TP("a", 0): 100, TP("a", 1): 70}),
        LogDirDescription(2, "/d2", None, {TP("a", 0): 100, TP("a", 1): 90}),
    ]
    sizes = model.partition_sizes(dirs)
    assert sizes == {TP("a", 0): 100, TP("a", 1): 90}
    rows = {r.name: r for r in model.topic_rows(TOPICS, starts, ends, sizes)}
    assert list(rows) == ["__consumer_offsets", "a", "b"]
    a = rows["a"]
    assert (a.partitions, a.replication_factor, a.messages, a.size, a.under_replicated) == (
        2,
        2,
        17,
        190,
        1,
    )
    assert rows["b"].messages is None and rows["b"].size is None
    assert rows["__consumer_offsets"].internal


def test_topic_view_rows_per_partition() -> None:
    starts = {TP("a", 0): (5, -1), TP("a", 1): (0, -1)}
    ends = {TP("a", 0): (15, -1), TP("a", 1): (7, -1)}
    view = model.topic_view(
        TOPICS["a"], starts, ends, {TP("a", 0): 10}, {"z": "1", "a": None}, overrides=["z"]
    )
    p0, p1 = view.partitions
    assert (p0.leader, p0.replicas, p0.isr, p0.messages, p0.size) == (1, (1, 2), (1, 2), 10, 10)
    assert p1.under_replicated and not p0.under_replicated and p1.size is None
    assert view.configs == (("a", None, False), ("z", "1", True))
    assert view.messages == 17 and view.size == 10


def test_group_view_lag_per_partition() -> None:
    m = MemberDescription(
        "m-1", None, "client-1", "/127.0.0.1", frozenset({TP("t", 0), TP("t", 1)})
    )
    desc = GroupDescription("g", "Stable", "consumer", "range", (m,))
    committed = {TP("t", 0): 3, TP("t", 2): 9}
    ends = {TP("t", 0): (10, -1), TP("t", 1): (4, -1), TP("t", 2): (9, -1)}
    view = model.group_view(desc, committed, ends)
    rows = [(r.partition, r.committed, r.end_offset, r.lag, r.member_id) for r in view.partitions]
    assert rows == [(0, 3, 10, 7, "m-1"), (1, None, 4, None, "m-1"), (2, 9, 9, 0, None)]
    assert view.total_lag == 7
    assert view.lags() == {TP("t", 0): 7, TP("t", 2): 0}


@pytest.mark.parametrize(
    ("data", "mode", "kind", "text"),
    [
        (None, "auto", "null", "null"),
        (b"hello", "auto", "text", "hello"),
        (b'{"a": [1, 2]}', "auto", "json", '{\n  "a": [\n    1,\n    2\n  ]\n}'),
        (b'{"a": ', "auto", "text", '{"a": '),
        (b"42", "auto", "text", "42"),
        (b"42", "json", "json", "42"),
        (b"not json", "json", "text", "not json"),
        (b"\x00\x01\xff", "auto", "hex", "00 01 ff"),
        (b"\xff\x01", "text", "hex", "ff 01"),
        (b"\x1b[31mred", "auto", "hex", "1b 5b 33 31 6d 72 65 64"),
        (b"\x1b[31mred", "text", "text", "\x1b[31mred"),
        (b"hi", "hex", "hex", "68 69"),
        ("héllo".encode(), "auto", "text", "héllo"),
    ],
)
def test_render_bytes(data: bytes | None, mode: model.DecodeMode, kind: str, text: str) -> None:
    shown = render_bytes(data, mode)
    assert (shown.kind, shown.text) == (kind, text)


def test_render_bytes_cuts_long_values() -> None:
    shown = render_bytes(b"x" * 10_000)
    assert shown.cut and shown.size == 10_000 and len(shown.text) == model.SHOW_BYTES


def test_browse_query_defaults_and_modes() -> None:
    q = model.parse_browse_query("t", {})
    assert (q.partition, q.start, q.count, q.decode) == (None, "end", 20, "auto")
    q = model.parse_browse_query("t", {"partition": "2", "offset": "17", "count": "5"})
    assert (q.partition, q.start, q.value, q.count) == (2, "offset", 17, 5)
    q = model.parse_browse_query("t", {"start": "timestamp", "timestamp": "1970-01-01T00:00:01"})
    assert q.value == 1000
    q = model.parse_browse_query(
        "t", {"start": "timestamp", "timestamp": "2024-05-01T12:00:00+02:00"}
    )
    assert q.value == 1714557600000


@pytest.mark.parametrize(
    ("word", "start"),
    [
        ("beginning", "beginning"),
        ("oldest", "beginning"),
        ("earliest", "beginning"),
        ("end", "end"),
        ("newest", "end"),
        ("Latest", "end"),
    ],
)
def test_browse_query_takes_the_pages_and_kafkas_words_for_the_ends(word: str, start: str) -> None:
    """docs/console.md: the page says "the oldest" and "the newest", Kafka says
    earliest and latest; ``start=`` takes each, as beginning or end."""
    assert model.parse_browse_query("t", {"start": word}).start == start


@pytest.mark.parametrize(
    ("form", "says"),
    [
        ({"start": "offset", "offset": "abc"}, "offset must be a whole number, got 'abc'"),
        ({"start": "offset"}, "offset: give the offset"),
        ({"partition": "-1"}, "partition must be at least 0"),
        ({"partition": "x"}, "partition must be a whole number"),
        ({"count": "0"}, "count must be at least 1"),
        ({"count": "501"}, "count must be at most 500"),
        ({"decode": "yaml"}, "decode must be one of auto, text, json, hex"),
        ({"start": "sideways"}, "start must be beginning, end, offset or timestamp"),
        (
            {"start": "timestamp", "timestamp": "yesterday"},
            "timestamp must be milliseconds or an ISO",
        ),
        ({"start": "timestamp"}, "timestamp: give the time"),
    ],
)
def test_browse_query_refusals_name_the_field(form: dict[str, str], says: str) -> None:
    with pytest.raises(InputError, match=says.replace("(", r"\(")):
        model.parse_browse_query("t", form)


def test_new_topic_form() -> None:
    t = model.parse_new_topic_form(
        {
            "name": " events.v1 ",
            "partitions": "6",
            "replication_factor": "",
            "configs": "retention.ms=1000\n\ncleanup.policy: compact",
        }
    )
    assert (t.name, t.partitions, t.replication_factor) == ("events.v1", 6, -1)
    assert t.configs == {"retention.ms": "1000", "cleanup.policy": "compact"}
    for form, says in [
        ({"name": ""}, "topic: give a name"),
        ({"name": "a b"}, "not a valid name"),
        ({"name": ".."}, "not a valid name"),
        ({"name": "x" * 250}, "not a valid name"),
        ({"name": "ok", "partitions": "0"}, "partitions must be at least 1"),
        ({"name": "ok", "configs": "novalue"}, "configs, line 1: write name=value"),
    ]:
        with pytest.raises(InputError, match=says):
            model.parse_new_topic_form(form)


def test_produce_form() -> None:
    p = model.parse_produce_form(
        "t", {"partition": "", "key": "", "value": "v", "headers": "a=1\nb: two"}
    )
    assert (p.partition, p.key, p.value, p.headers) == (
        None,
        None,
        b"v",
        (("a", b"1"), ("b", b"two")),
    )
    p = model.parse_produce_form("t", {"partition": "3", "key": "k", "value": ""})
    assert (p.partition, p.key, p.value) == (3, b"k", b"")
    with pytest.raises(InputError, match="partition must be a whole number"):
        model.parse_produce_form("t", {"partition": "one"})


def test_acl_form() -> None:
    b = model.parse_acl_form(
        {
            "resource_type": "topic",
            "name": "orders",
            "pattern_type": "prefixed",
            "principal": "User:alice",
            "host": "",
            "operation": "read",
            "permission": "deny",
        }
    )
    assert (
        b.resource_type,
        b.name,
        b.pattern_type,
        b.principal,
        b.host,
        b.operation,
        b.permission,
    ) == (
        AclResourceType.TOPIC,
        "orders",
        PatternType.PREFIXED,
        "User:alice",
        "*",
        AclOperation.READ,
        AclPermissionType.DENY,
    )
    cluster = model.parse_acl_form(
        {"resource_type": "cluster", "principal": "User:a", "operation": "alter"}
    )
    assert cluster.name == "kafka-cluster"
    for form, says in [
        (
            {"resource_type": "any", "name": "x", "principal": "User:a", "operation": "read"},
            "resource type must be one of topic",
        ),
        (
            {"resource_type": "topic", "name": "x", "principal": "alice", "operation": "read"},
            "principal must be Type:name",
        ),
        (
            {"resource_type": "topic", "name": "x", "principal": "User:a", "operation": "any"},
            "operation must be one of all",
        ),
        (
            {"resource_type": "topic", "name": "", "principal": "User:a", "operation": "read"},
            "resource name",
        ),
    ]:
        with pytest.raises(InputError, match=says):
            model.parse_acl_form(form)


def test_lag_history_keeps_the_newest_and_merges_close_samples() -> None:
    h = LagHistory(keep=3, min_gap=1.0)
    h.record("g", 0.0, {TP("t", 0): 5})
    h.record("g", 0.5, {TP("t", 0): 6})  # replaces the sample before (too close)
    assert [s.total for s in h.samples("g")] == [6]
    for i in range(1, 5):
        h.record("g", float(i * 2), {TP("t", 0): i})
    assert [s.at for s in h.samples("g")] == [4.0, 6.0, 8.0]
    assert h.last_total("g") == 4 and h.last_total("other") is None
    h.forget(["other"])
    assert h.samples("g") == []


def test_lag_history_keeps_samples_min_gap_apart_whatever_came_between() -> None:
    """A visit, the periodic sampler's round 0.3 s later, the next visit 0.65 s
    after the first: the round replaces the first visit's sample, and the next
    visit is a second sample (two points, a chart), not a third replacement."""
    h = LagHistory(min_gap=0.5)
    h.record("g", 10.0, {TP("t", 0): 4})
    h.record("g", 10.3, {TP("t", 0): 4})
    h.record("g", 10.65, {TP("t", 0): 7})
    assert [(s.at, s.total) for s in h.samples("g")] == [(10.3, 4), (10.65, 7)]
    # A page reloaded every second with min_gap 5: one sample kept per 5 s
    # window (its last), and the newest.
    h = LagHistory(min_gap=5)
    for second in range(12):
        h.record("g", float(second), {TP("t", 0): second})
    assert [s.at for s in h.samples("g")] == [4.0, 9.0, 11.0]


def test_lag_chart_geometry() -> None:
    h = LagHistory(min_gap=0)
    assert model.lag_chart(h.samples("g")) is None
    h.record("g", 100.0, {TP("t", 0): 10, TP("t", 1): 0})
    assert model.lag_chart(h.samples("g")) is None  # one point: no line
    h.record("g", 110.0, {TP("t", 0): 30, TP("t", 1): 40})
    chart = model.lag_chart(h.samples("g"), width=300, height=120)
    assert chart is not None
    assert chart.y_max == 100  # the peak total (70) rounded up to 1, 2 or 5 x 10^n
    total, worst, second = chart.series
    assert (total.label, total.last) == ("total", 70)
    assert (worst.label, second.label) == ("t-1", "t-0")  # most lag first
    # x runs from the left margin to the right edge; y from the bottom up.
    first, last = total.points.split()
    assert first == "56.0,87.2" and last.startswith("292.0,")
    assert [label for _, label in chart.y_ticks] == ["0", "50", "100"]


def test_group_rows_carry_the_last_sampled_lag() -> None:
    h = LagHistory()
    h.record("b", 1.0, {TP("t", 0): 4}, no_commit=2)
    rows = model.group_rows(
        [GroupListing("b", "consumer", "Stable"), GroupListing("a", "", "Empty")], h, {"b": 3}
    )
    assert [(r.group.group_id, r.members) for r in rows] == [("a", None), ("b", 3)]
    assert rows[0].lag is None
    assert rows[1].lag is not None and (rows[1].lag.total, rows[1].lag.no_commit) == (4, 2)


def test_brokerlite_console_listen_setting() -> None:
    from trafka.brokerlite.cli import build_config
    from trafka.brokerlite.config import BrokerConfig, ConfigError

    assert (
        build_config(None, {"console_listen": "127.0.0.1:8081"}).console_listen == "127.0.0.1:8081"
    )
    assert (
        BrokerConfig().with_overrides({"console.listen": "127.0.0.1:0"}).console_listen
        == "127.0.0.1:0"
    )
    with pytest.raises(ConfigError, match="console_listen"):
        BrokerConfig(console_listen="nowhere")
    with pytest.raises(ConfigError, match="SASL_PLAINTEXT listener refuses"):
        BrokerConfig().with_overrides(
            {
                "console_listen": "127.0.0.1:0",
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_users": {"admin": "secret"},
            }
        )


def test_share_group_view_shares_partitions_between_members() -> None:
    from trafka.sdk.admin import (
        ShareGroupDescription,
        ShareMemberDescription,
        SharePartitionOffsetInfo,
    )

    a = ShareMemberDescription("a", "c1", "/h", None, 3, ("t",), frozenset({TP("t", 0)}))
    b = ShareMemberDescription(
        "b", "c2", "/h", None, 3, ("t",), frozenset({TP("t", 0), TP("t", 1)})
    )
    desc = ShareGroupDescription("s", "Stable", 3, 3, "simple", (b, a))
    offsets = {
        TP("t", 0): SharePartitionOffsetInfo(4, 0, 2),
        TP("t", 1): SharePartitionOffsetInfo(1, 0, None),
    }
    ends = {TP("t", 0): (10, -1), TP("t", 1): (5, -1)}
    view = model.share_group_view(desc, offsets, ends)
    assert view.group_type == "share" and [m[0] for m in view.members] == ["a", "b"]
    rows = [(r.partition, r.committed, r.end_offset, r.lag, r.member_id) for r in view.partitions]
    # The broker's lag where it counts one (records acknowledged past the start
    # offset are not lag), end minus start where it does not.
    assert rows == [(0, 4, 10, 2, "a, b"), (1, 1, 5, 4, "b")]
    assert view.total_lag == 6


def test_plan_reads_per_partition() -> None:
    lows, highs = {0: 0, 1: 5, 2: 0}, {0: 10, 1: 8, 2: 0}
    q = model.parse_browse_query("t", {"count": "4"})
    assert model.plan_reads(q, lows, highs, {}) == ({0: 6, 1: 5}, [])  # 2 is empty
    q = model.parse_browse_query("t", {"start": "beginning"})
    assert model.plan_reads(q, lows, highs, {})[0] == {0: 0, 1: 5}
    q = model.parse_browse_query("t", {"start": "offset", "offset": "2"})
    starts, notes = model.plan_reads(q, lows, highs, {})
    assert starts == {0: 2, 1: 5}
    assert notes == ["partition 1: offset 2 is outside the log (5 to 8); read from 5"]
    q = model.parse_browse_query("t", {"start": "timestamp", "timestamp": "5"})
    assert model.plan_reads(q, lows, highs, {0: 7, 1: None, 2: None}) == ({0: 7}, [])
    assert model.plan_reads(q, lows, highs, {0: None}) == ({}, ["no message at or after that time"])


def test_merge_messages_by_time_across_partitions() -> None:
    def row(p: int, o: int, ts: int) -> model.MessageRow:
        return model.message_row(p, o, ts, None, b"v", (), "auto")

    rows = [row(0, 0, 30), row(1, 0, 10), row(1, 1, 40), row(0, 1, 20), row(2, 0, 20)]
    firsts = model.merge_messages(rows, "beginning", 3, partitions=3)
    assert [(r.partition, r.offset) for r in firsts] == [(1, 0), (0, 1), (2, 0)]
    lasts = model.merge_messages(rows, "end", 2, partitions=3)
    assert [(r.partition, r.offset) for r in lasts] == [(1, 1), (0, 0)]  # newest first
    one = model.merge_messages([row(0, 5, 9), row(0, 4, 10)], "end", 5, partitions=1)
    assert [r.offset for r in one] == [5, 4]  # one partition: offset order, whatever the clock
    oldest = model.merge_messages([row(0, 5, 9), row(0, 4, 10)], "beginning", 5, partitions=1)
    assert [r.offset for r in oldest] == [4, 5]


def _reset(to: str, value: int = 0) -> model.ResetForm:
    return model.ResetForm("g", None, None, to, value, False)  # type: ignore[arg-type]


def test_reset_plans_follow_kafka_consumer_groups() -> None:
    """kafka-consumer-groups --reset-offsets (ConsumerGroupCommand): earliest is
    the log start, latest the log end, an offset outside the log is moved to
    its nearest end, and a time with no message that recent is the log end."""
    a, b, c = TP("t", 0), TP("t", 1), TP("u", 0)
    current = {a: 5, b: 7}
    starts, ends = {a: 2, b: 0, c: 10}, {a: 9, b: 7, c: 20}
    rows = model.plan_reset(_reset("earliest"), current, starts, ends, {})
    assert [(r.topic, r.partition, r.current, r.new) for r in rows] == [
        ("t", 0, 5, 2),
        ("t", 1, 7, 0),
        ("u", 0, None, 10),
    ]
    assert [r.new for r in model.plan_reset(_reset("latest"), current, starts, ends, {})] == [
        9,
        7,
        20,
    ]
    moved = model.plan_reset(_reset("offset", 8), current, starts, ends, {})
    assert [(r.new, r.note) for r in moved] == [
        (8, ""),
        (7, "8 is past the log end: set to 7"),
        (10, "8 is below the log start: set to 10"),
    ]
    timed = model.plan_reset(_reset("timestamp", 1_000), current, starts, ends, {a: 4, b: None})
    assert [(r.new, r.note) for r in timed] == [
        (4, ""),
        (7, "no message at or after the time: set to the log end"),
        (20, "no message at or after the time: set to the log end"),
    ]


def test_reset_form_and_its_refusals() -> None:
    form = model.parse_reset_form(
        "g", {"topic": "t", "partition": "1", "to": "offset", "offset": "5"}
    )
    assert form == model.ResetForm("g", "t", 1, "offset", 5, False)
    at = model.parse_reset_form(
        "g", {"to": "timestamp", "timestamp": "1970-01-01T00:00:01", "execute": "1"}
    )
    assert (at.topic, at.value, at.execute) == (None, 1000, True)
    for fields, says in (
        ({"to": "yesterday"}, "to must be one of earliest, latest, timestamp, offset"),
        ({"to": "offset"}, "offset: give the offset"),
        ({"to": "offset", "offset": "-3"}, "offset must be at least 0"),
        ({"to": "timestamp"}, "timestamp: give the time"),
        ({"to": "earliest", "partition": "1"}, "partition: name the topic"),
        ({"to": "earliest", "topic": "no spaces"}, "topic"),
    ):
        with pytest.raises(InputError, match=says):
            model.parse_reset_form("g", fields)


def test_only_an_inactive_group_is_reset_or_deleted() -> None:
    model.refuse_unless_inactive("g", "Empty", 0, "offsets can be reset")
    model.refuse_unless_inactive("g", "Dead", 0, "offsets can be reset")
    for state, members in (("Stable", 2), ("PreparingRebalance", 1), ("Empty", 1)):
        with pytest.raises(InputError, match=f"inactive .no members., but its state is {state}"):
            model.refuse_unless_inactive("g", state, members, "offsets can be reset")


def test_config_form_sets_and_resets() -> None:
    change = model.parse_config_form("t", {"set": "retention.ms=1000\n"}, ["cleanup.policy", ""])
    assert change.changes == {"retention.ms": "1000", "cleanup.policy": None}
    with pytest.raises(InputError, match=r"retention\.ms: set and reset at once"):
        model.parse_config_form("t", {"set": "retention.ms=1"}, ["retention.ms"])
    with pytest.raises(InputError, match="give name=value lines, or tick configs to reset"):
        model.parse_config_form("t", {"set": "  "}, [])
    with pytest.raises(InputError, match="set, line 1: write name=value"):
        model.parse_config_form("t", {"set": "retention.ms"}, [])


def test_partition_count_only_grows() -> None:
    assert model.parse_partition_count("t", {"count": "5"}, 3) == 5
    for raw, says in (
        ("3", "has 3 partitions; give more"),
        ("", "give the new number"),
        ("x", "whole"),
    ):
        with pytest.raises(InputError, match=says):
            model.parse_partition_count("t", {"count": raw}, 3)


def test_purge_form_needs_the_name() -> None:
    assert model.parse_purge_form("t", {"confirm": "t"}) == model.PurgeForm("t", None, None)
    assert model.parse_purge_form("t", {"confirm": "t", "partition": "1", "before": "7"}) == (
        model.PurgeForm("t", 1, 7)
    )
    with pytest.raises(InputError, match="type the topic's name"):
        model.parse_purge_form("t", {"confirm": "u"})
