"""Streams groups (KIP-1071; KIP-1331's topology descriptions) under the
tenants filter (``trafka.proxy.tenants``, issue #83; docs/proxy.md, "Virtual
clusters (tenants)"), sans I/O: the filter is handed the codec's bodies as a
client and a broker would send them, and every field the specs mark
``entityType: topicName`` or ``groupId`` (StreamsGroupHeartbeat,
StreamsGroupDescribe, StreamsGroupTopologyDescriptionUpdate) is checked
prefixed on its way to the broker and unprefixed on its way back; another
tenant's names are left out of the answers."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from trafka.codec import ApiKey, protocol
from trafka.codec.messages import k16_list_groups as lg
from trafka.codec.messages import k88_streams_group_heartbeat as sgh
from trafka.codec.messages import k89_streams_group_describe as sgd
from trafka.codec.messages import k93_streams_group_topology_description_update as sgu
from trafka.proxy.filters import FilterContext, Session
from trafka.proxy.tenants import Tenants

pytestmark = pytest.mark.compat(
    "proxy", "virtual clusters (tenants): names prefixed, others hidden"
)

TENANTS = {
    "tenants": [
        {"name": "acme", "prefix": "acme.", "principals": ["User:alice"]},
        {"name": "globex", "prefix": "globex.", "principals": ["User:bob"]},
    ]
}
H = sgh.StreamsGroupHeartbeatRequest
A = sgh.StreamsGroupHeartbeatResponse
D = sgd.StreamsGroupDescribeResponse
U = sgu.StreamsGroupTopologyDescriptionUpdateRequest


@pytest.fixture
def tenants() -> Tenants:
    t = Tenants()
    t.configure(TENANTS)
    return t


def _ctx(key: int, version: int = 1, principal: str = "User:alice") -> FilterContext:
    session = Session(authenticated=True, principal=principal)
    return FilterContext(key, version, 7, "app", ("127.0.0.1", 1), -1, session=session)


def _wire(key: int, version: int, body: Any, *, answer: bool) -> Any:
    """The body through the codec's bytes, as the proxy sends it on."""
    if answer:
        data = protocol.encode_response_body(key, version, body)
        return protocol.decode_response_body(key, version, data)
    return protocol.decode_request_body(
        key, version, protocol.encode_request_body(key, version, body)
    )


def _topology(
    source: list[str], regex: list[str], changelog: str, sink: str, repartition: str
) -> Any:
    return H.Topology(
        epoch=1,
        subtopologies=[
            H.Subtopology(
                subtopology_id="0",
                source_topics=source,
                source_topic_regex=regex,
                state_changelog_topics=[
                    H.TopicInfo(
                        name=changelog,
                        partitions=-1,
                        replication_factor=-1,
                        topic_configs=[H.KeyValue(key="cleanup.policy", value="compact")],
                    )
                ],
                repartition_sink_topics=[sink],
                repartition_source_topics=[],
                copartition_groups=[],
            ),
            H.Subtopology(
                subtopology_id="1",
                source_topics=[],
                repartition_source_topics=[
                    H.TopicInfo(name=repartition, partitions=3, replication_factor=-1)
                ],
                # Copartition groups name topics by their index in the lists: kept.
                copartition_groups=[H.CopartitionGroup(repartition_source_topics=[0])],
            ),
        ],
    )


def test_a_heartbeats_topology_is_prefixed(tenants: Tenants) -> None:
    """Every topic of KIP-1071's topology (source, repartition sink and source,
    changelog) and the group id, prefixed; a source regex anchored behind the
    prefix, as a KIP-848 consumer's (it matches only the tenant's topics)."""
    request = H(
        group_id="app",
        member_id="m1",
        member_epoch=0,
        rebalance_timeout_ms=30_000,
        process_id="p1",
        topology=_topology(
            ["orders"], ["in-.*"], "app-store-changelog", "app-r-repartition", "app-r-repartition"
        ),
        active_tasks=[H.TaskIds(subtopology_id="0", partitions=[0, 1])],
    )
    sent = tenants.on_request(_ctx(ApiKey.STREAMS_GROUP_HEARTBEAT), request)
    sent = _wire(ApiKey.STREAMS_GROUP_HEARTBEAT, 1, sent, answer=False)
    assert sent.group_id == "acme.app"
    first, second = sent.topology.subtopologies
    assert first.source_topics == ["acme.orders"]
    assert first.source_topic_regex == ["acme\\.(?:in-.*)"]
    assert [t.name for t in first.state_changelog_topics] == ["acme.app-store-changelog"]
    assert first.state_changelog_topics[0].topic_configs == [
        H.KeyValue(key="cleanup.policy", value="compact")
    ]
    assert first.repartition_sink_topics == ["acme.app-r-repartition"]
    assert [t.name for t in second.repartition_source_topics] == ["acme.app-r-repartition"]
    assert second.copartition_groups == request.topology.subtopologies[1].copartition_groups
    # Tasks name subtopologies, not topics.
    assert sent.active_tasks == request.active_tasks


def test_a_heartbeat_without_a_topology_names_only_its_group(tenants: Tenants) -> None:
    request = H(group_id="app", member_id="m1", member_epoch=3, topology=None)
    sent = tenants.on_request(_ctx(ApiKey.STREAMS_GROUP_HEARTBEAT), request)
    assert sent == dataclasses.replace(request, group_id="acme.app")


def test_a_heartbeats_answer_is_unprefixed(tenants: Tenants) -> None:
    """The interactive queries' partitions by endpoint name topics (the
    tenant's unprefixed, any other left out); the status details name the
    group's topics (KIP-1071's MISSING_SOURCE_TOPICS), shown without the prefix."""
    ctx = _ctx(ApiKey.STREAMS_GROUP_HEARTBEAT)
    tenants.on_request(ctx, H(group_id="app", member_id="m1", member_epoch=1))
    answer = A(
        member_id="m1",
        member_epoch=2,
        heartbeat_interval_ms=5000,
        status=[A.Status(status_code=1, status_detail="Source topics acme.orders are missing.")],
        active_tasks=[A.TaskIds(subtopology_id="0", partitions=[0])],
        partitions_by_user_endpoint=[
            A.EndpointToPartitions(
                user_endpoint=A.Endpoint(host="h", port=1),
                active_partitions=[
                    A.TopicPartition(topic="acme.orders", partitions=[0]),
                    A.TopicPartition(topic="globex.orders", partitions=[0]),
                ],
                standby_partitions=[A.TopicPartition(topic="acme.app-s-changelog", partitions=[1])],
            )
        ],
    )
    shown = tenants.on_response(ctx, _wire(ApiKey.STREAMS_GROUP_HEARTBEAT, 1, answer, answer=True))
    (endpoint,) = shown.partitions_by_user_endpoint
    assert [t.topic for t in endpoint.active_partitions] == ["orders"]
    assert [t.topic for t in endpoint.standby_partitions] == ["app-s-changelog"]
    assert [s.status_detail for s in shown.status] == ["Source topics orders are missing."]
    assert shown.active_tasks == answer.active_tasks


def _node(name: str, sources: list[str], sink: str | None) -> Any:
    return D.TopologyDescriptionNode(
        name=name, node_type=1 if sources else 3, source_topics=sources, sink_topic=sink
    )


def test_describe_asks_by_the_prefixed_id_and_shows_the_tenants_names(tenants: Tenants) -> None:
    """StreamsGroupDescribe: group ids prefixed; the answer's topology (v0)
    and topology description (v1, KIP-1331) shown with the tenant's names;
    nothing of another tenant's shown."""
    ctx = _ctx(ApiKey.STREAMS_GROUP_DESCRIBE)
    request = sgd.StreamsGroupDescribeRequest(group_ids=["app"], include_topology_description=True)
    sent = tenants.on_request(ctx, request)
    assert sent.group_ids == ["acme.app"]
    info = D.TopicInfo
    group = D.DescribedGroup(
        group_id="acme.app",
        group_state="Stable",
        topology=D.Topology(
            epoch=1,
            subtopologies=[
                D.Subtopology(
                    subtopology_id="0",
                    source_topics=["acme.orders", "globex.orders"],
                    repartition_sink_topics=["acme.app-r-repartition"],
                    state_changelog_topics=[info(name="acme.app-s-changelog", partitions=1)],
                    repartition_source_topics=[info(name="acme.app-r-repartition", partitions=1)],
                )
            ],
        ),
        members=[D.Member(member_id="m1", process_id="p", assignment=D.Assignment(
            active_tasks=[D.TaskIds(subtopology_id="0", partitions=[0])]))],
        topology_description=D.TopologyDescription(
            subtopologies=[
                D.TopologyDescriptionSubtopology(
                    subtopology_id="0",
                    nodes=[
                        _node("KSTREAM-SOURCE-0000000000", ["acme.orders"], None),
                        _node("KSTREAM-SINK-0000000001", [], "acme.totals"),
                    ],
                )
            ],
            global_stores=[
                D.TopologyDescriptionGlobalStore(
                    source=_node("KSTREAM-SOURCE-0000000002", ["acme.rates"], None),
                    processor=_node("KTABLE-SOURCE-0000000003", [], None),
                )
            ],
        ),
        topology_description_status=3,
    )  # fmt: skip
    answer = D(groups=[group])
    shown = tenants.on_response(ctx, _wire(ApiKey.STREAMS_GROUP_DESCRIBE, 1, answer, answer=True))
    (g,) = shown.groups
    assert g.group_id == "app"
    (sub,) = g.topology.subtopologies
    assert sub.source_topics == ["orders"]
    assert sub.repartition_sink_topics == ["app-r-repartition"]
    assert [t.name for t in sub.state_changelog_topics] == ["app-s-changelog"]
    assert [t.name for t in sub.repartition_source_topics] == ["app-r-repartition"]
    nodes = g.topology_description.subtopologies[0].nodes
    assert [(n.source_topics, n.sink_topic) for n in nodes] == [(["orders"], None), ([], "totals")]
    (store,) = g.topology_description.global_stores
    assert store.source.source_topics == ["rates"] and store.processor.sink_topic is None
    assert g.members == group.members


def test_describe_of_a_group_of_no_one_names_nothing(tenants: Tenants) -> None:
    """A described group that is not the tenant's (the broker's answer holds
    only what was asked, which is always the tenant's: a guard) is left out."""
    ctx = _ctx(ApiKey.STREAMS_GROUP_DESCRIBE)
    tenants.on_request(ctx, sgd.StreamsGroupDescribeRequest(group_ids=["x"]))
    answer = D(groups=[D.DescribedGroup(group_id="globex.x", error_code=69)])
    assert tenants.on_response(ctx, answer).groups == []


def test_a_topology_description_update_is_prefixed(tenants: Tenants) -> None:
    """StreamsGroupTopologyDescriptionUpdate (KIP-1331): sent when a heartbeat
    answers TopologyDescriptionRequired; its nodes' topics prefixed."""
    request = U(
        group_id="app",
        member_id="m1",
        topology_epoch=1,
        topology_description=U.TopologyDescription(
            subtopologies=[
                U.TopologyDescriptionSubtopology(
                    subtopology_id="0",
                    nodes=[
                        U.TopologyDescriptionNode(name="src", node_type=1, source_topics=["a"]),
                        U.TopologyDescriptionNode(name="sink", node_type=3, sink_topic="b"),
                    ],
                )
            ],
            global_stores=[
                U.TopologyDescriptionGlobalStore(
                    source=U.TopologyDescriptionNode(name="g", node_type=1, source_topics=["c"]),
                    processor=U.TopologyDescriptionNode(name="p", node_type=2),
                )
            ],
        ),
    )
    key = ApiKey.STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE
    sent = _wire(key, 0, tenants.on_request(_ctx(key, 0), request), answer=False)
    assert sent.group_id == "acme.app"
    src, sink = sent.topology_description.subtopologies[0].nodes
    assert src.source_topics == ["acme.a"] and sink.sink_topic == "acme.b"
    assert sink.source_topics == [] and src.sink_topic is None
    (store,) = sent.topology_description.global_stores
    assert store.source.source_topics == ["acme.c"]
    assert store.processor == request.topology_description.global_stores[0].processor


def test_streams_apis_are_offered_and_list_groups_filters_streams_groups(
    tenants: Tenants,
) -> None:
    """ApiVersions offers the three streams APIs (served, no longer refused);
    ListGroups' streams groups (KIP-1071's group type "streams") are filtered
    by prefix as every other type's."""
    from trafka.proxy.tenants_apis import SERVED

    assert {
        ApiKey.STREAMS_GROUP_HEARTBEAT,
        ApiKey.STREAMS_GROUP_DESCRIBE,
        ApiKey.STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE,
    } <= SERVED
    ctx = _ctx(ApiKey.LIST_GROUPS, 5)
    asked = tenants.on_request(ctx, lg.ListGroupsRequest(types_filter=["streams"]))
    assert asked.types_filter == ["streams"]
    g = lg.ListGroupsResponse.ListedGroup
    answer = lg.ListGroupsResponse(groups=[
        g(group_id="acme.app", protocol_type="streams", group_state="Stable", group_type="streams"),
        g(group_id="globex.app", protocol_type="streams", group_state="Stable", group_type="streams"),
    ])  # fmt: skip
    assert [x.group_id for x in tenants.on_response(ctx, answer).groups] == ["app"]
