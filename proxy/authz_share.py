"""The proxy's authorization of share groups' and streams groups' APIs (see
:mod:`.authz_apis`' rules): what Kafka 4.4 checks and answers for each.

* ShareFetch and ShareAcknowledge: READ on the group, else the whole request
  is GROUP_AUTHORIZATION_FAILED (the share session untouched, as Kafka's);
  READ on each topic, else its partitions are TOPIC_AUTHORIZATION_FAILED
  (their acknowledgements dropped, as Kafka drops them). The request always
  reaches the broker with the topics allowed, none left perhaps: it moves the
  share session's epoch on, which the client counts on.
* DescribeShareGroupOffsets: DESCRIBE on each group (else the group's error),
  DESCRIBE on each topic named (else its partitions' error; a group asked for
  all its topics: those not describable left out of the answer).
* AlterShareGroupOffsets: READ on the group (the whole request refused), READ
  on each topic (its partitions refused). DeleteShareGroupOffsets: DELETE on
  the group, READ on each topic (the topic refused).
* Share and consumer groups' heartbeats (KIP-932, KIP-848): READ on the
  group, then DESCRIBE on every subscribed topic, else the heartbeat is
  TOPIC_AUTHORIZATION_FAILED. Streams groups' (KIP-1071): READ on the group,
  DESCRIBE on every topic of the topology (source, repartition and changelog
  topics). The CREATE Kafka asks for the internal topics a streams group makes
  is the brokers' to judge: the proxy cannot know which they will make.
* StreamsGroupDescribe: DESCRIBE on each group; StreamsGroupTopologyDescription
  Update: READ on the group.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import replace
from functools import partial
from typing import Any

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k68_consumer_group_heartbeat as cg_heartbeat_m
from trafka.codec.messages import k76_share_group_heartbeat as share_heartbeat_m
from trafka.codec.messages import k78_share_fetch as fetch_m
from trafka.codec.messages import k79_share_acknowledge as ack_m
from trafka.codec.messages import k88_streams_group_heartbeat as streams_heartbeat_m
from trafka.codec.messages import k89_streams_group_describe as streams_describe_m
from trafka.codec.messages import k90_describe_share_group_offsets as describe_offsets_m
from trafka.codec.messages import k91_alter_share_group_offsets as alter_offsets_m
from trafka.codec.messages import k92_delete_share_group_offsets as delete_offsets_m
from trafka.codec.messages import k93_streams_group_topology_description_update as topology_m

from .authz_parts import described_groups
from .filters import Respond

__all__ = ["SHARE_HANDLERS"]

TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
UNKNOWN_ID = ErrorCode.UNKNOWN_TOPIC_ID
TOPIC_MESSAGE = "Topic authorization failed."


def _refusal(j: Any, topic_id: uuid.UUID, operation: str) -> int:
    """0 when the topic (named by id) may be ``operation``-ed, else Kafka's error."""
    name = j.topic_name(None, topic_id)
    if name is None:
        return UNKNOWN_ID
    return 0 if j.ok(operation, "topic", name) else TOPIC_DENIED


def _share_session(j: Any, body: Any, response: Any, partition: Any, topic: Any) -> Any:
    """A ShareFetch or ShareAcknowledge: the group judged, then each topic; the
    refused topics' partitions merged into the broker's answer."""
    if not j.ok("READ", "group", body.group_id):
        return Respond(response(error_code=GROUP_DENIED))
    keep, errors = [], []
    for t in body.topics:
        code = _refusal(j, t.topic_id, "READ")
        if not code:
            keep.append(t)
            continue
        parts = [
            partition(partition_index=p.partition_index, error_code=code) for p in t.partitions
        ]
        errors.append(topic(topic_id=t.topic_id, partitions=parts))
    if not errors:
        return body
    j.later(lambda r: _merged(r, errors))
    return replace(body, topics=keep)


def _merged(r: Any, errors: list[Any]) -> Any:
    """The refused topics added to the broker's answer, unless it refused the
    whole request (then, as Kafka, it names none)."""
    return r if r.error_code else replace(r, responses=[*r.responses, *errors])


def share_fetch(j: Any, body: Any, version: int) -> Any:
    m = fetch_m.ShareFetchResponse
    part = partial(m.PartitionData, records=b"")  # no records (never null on the wire)
    return _share_session(j, body, m, part, m.ShareFetchableTopicResponse)


def share_acknowledge(j: Any, body: Any, version: int) -> Any:
    m = ack_m.ShareAcknowledgeResponse
    return _share_session(j, body, m, m.PartitionData, m.ShareAcknowledgeTopicResponse)


def describe_share_group_offsets(j: Any, body: Any, version: int) -> Any:
    m = describe_offsets_m.DescribeShareGroupOffsetsResponse
    keep, denied = [], []
    refused: dict[str, list[Any]] = {}  # group id -> its topics refused
    for g in body.groups:
        if not j.ok("DESCRIBE", "group", g.group_id):
            denied.append(
                m.DescribeShareGroupOffsetsResponseGroup(
                    group_id=g.group_id, error_code=GROUP_DENIED,
                )
            )  # fmt: skip
            continue
        if g.topics is None:  # all its topics: those not describable left out of the answer
            keep.append(g)
            continue
        allowed = [t for t in g.topics if j.ok("DESCRIBE", "topic", t.topic_name)]
        keep.append(replace(g, topics=allowed))
        refused[g.group_id] = [
            m.DescribeShareGroupOffsetsResponseTopic(
                topic_name=t.topic_name,
                topic_id=uuid.UUID(int=0),
                partitions=[
                    m.DescribeShareGroupOffsetsResponsePartition(
                        partition_index=p,
                        start_offset=-1,
                        leader_epoch=-1,
                        lag=-1,
                        error_code=TOPIC_DENIED,
                        error_message=TOPIC_MESSAGE,
                    )
                    for p in t.partitions
                ],
            )
            for t in g.topics
            if t not in allowed
        ]

    def merged(r: Any) -> Any:
        groups = [
            replace(
                g,
                topics=[
                    *(t for t in g.topics if j.allows("DESCRIBE", "topic", t.topic_name)),
                    *refused.get(g.group_id, ()),
                ],
            )
            for g in r.groups
        ]
        return replace(r, groups=[*groups, *denied])

    if not keep:
        return Respond(m(groups=denied))
    j.later(merged)
    return replace(body, groups=keep)


def alter_share_group_offsets(j: Any, body: Any, version: int) -> Any:
    m = alter_offsets_m.AlterShareGroupOffsetsResponse
    if not j.ok("READ", "group", body.group_id):
        return Respond(m(error_code=GROUP_DENIED, error_message="Group authorization failed."))
    keep = [t for t in body.topics if j.ok("READ", "topic", t.topic_name)]
    errors = [
        m.AlterShareGroupOffsetsResponseTopic(
            topic_name=t.topic_name,
            topic_id=uuid.UUID(int=0),
            partitions=[
                m.AlterShareGroupOffsetsResponsePartition(
                    partition_index=p.partition_index,
                    error_code=TOPIC_DENIED,
                    error_message=TOPIC_MESSAGE,
                )
                for p in t.partitions
            ],
        )
        for t in body.topics
        if t not in keep
    ]
    return _partial(j, body, keep, m(responses=errors), errors)


def delete_share_group_offsets(j: Any, body: Any, version: int) -> Any:
    m = delete_offsets_m.DeleteShareGroupOffsetsResponse
    if not j.ok("DELETE", "group", body.group_id):
        return Respond(m(error_code=GROUP_DENIED, error_message="Group authorization failed."))
    keep = [t for t in body.topics if j.ok("READ", "topic", t.topic_name)]
    errors = [
        m.DeleteShareGroupOffsetsResponseTopic(
            topic_name=t.topic_name,
            topic_id=uuid.UUID(int=0),
            error_code=TOPIC_DENIED,
            error_message=TOPIC_MESSAGE,
        )
        for t in body.topics
        if t not in keep
    ]
    return _partial(j, body, keep, m(responses=errors), errors)


def _partial(j: Any, body: Any, keep: list[Any], answer: Any, errors: list[Any]) -> Any:
    if not errors:
        return body
    if not keep:
        return Respond(answer)
    j.later(lambda r: _merged(r, errors))
    return replace(body, topics=keep)


def _heartbeat(response: Any) -> Callable[[Any, Any, int], Any]:
    """A consumer or share group's heartbeat: READ on the group, DESCRIBE on
    every topic it subscribes to."""

    def judge(j: Any, body: Any, version: int) -> Any:
        if not j.ok("READ", "group", body.group_id):
            return Respond(response(error_code=GROUP_DENIED))
        if not _describable(j, body.subscribed_topic_names or ()):
            return Respond(response(error_code=TOPIC_DENIED))
        return body

    return judge


def _describable(j: Any, topics: Iterable[str]) -> bool:
    """Whether every topic may be described (each decision counted, as Kafka's
    filterByAuthorized counts them)."""
    return all([j.ok("DESCRIBE", "topic", t) for t in dict.fromkeys(topics)])


def streams_group_heartbeat(j: Any, body: Any, version: int) -> Any:
    m = streams_heartbeat_m.StreamsGroupHeartbeatResponse
    if not j.ok("READ", "group", body.group_id):
        return Respond(m(error_code=GROUP_DENIED))
    topics: list[str] = []
    for s in body.topology.subtopologies if body.topology is not None else ():
        topics += s.source_topics
        topics += s.repartition_sink_topics
        topics += [t.name for t in (*s.repartition_source_topics, *s.state_changelog_topics)]
    if not _describable(j, topics):
        return Respond(m(error_code=TOPIC_DENIED))
    return body


def streams_group_describe(j: Any, body: Any, version: int) -> Any:
    return described_groups(j, body, streams_describe_m.StreamsGroupDescribeResponse)


def streams_group_topology_description_update(j: Any, body: Any, version: int) -> Any:
    if j.ok("READ", "group", body.group_id):
        return body
    return Respond(
        topology_m.StreamsGroupTopologyDescriptionUpdateResponse(error_code=GROUP_DENIED)
    )


SHARE_HANDLERS: dict[int, Callable[[Any, Any, int], Any]] = {
    ApiKey.SHARE_FETCH: share_fetch,
    ApiKey.SHARE_ACKNOWLEDGE: share_acknowledge,
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: describe_share_group_offsets,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: alter_share_group_offsets,
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: delete_share_group_offsets,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: _heartbeat(cg_heartbeat_m.ConsumerGroupHeartbeatResponse),
    ApiKey.SHARE_GROUP_HEARTBEAT: _heartbeat(share_heartbeat_m.ShareGroupHeartbeatResponse),
    ApiKey.STREAMS_GROUP_HEARTBEAT: streams_group_heartbeat,
    ApiKey.STREAMS_GROUP_DESCRIBE: streams_group_describe,
    ApiKey.STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE: streams_group_topology_description_update,
}
