"""What the proxy's authorization checks for each API, and the errors it
answers with: Kafka's (its ``KafkaApis`` and ``ControllerApis`` with an
authorizer), so a client meets through the proxy what it would meet from
Apache Kafka holding the same ACLs.

Rules:

* Each handler takes a :class:`Judge` (who asks, and the rules), the request
  and its version, and returns the request to forward (the parts allowed) or
  :class:`~.filters.Respond` when nothing of it is allowed. Parts refused
  are answered as Kafka answers them, merged into the broker's answer
  (:meth:`Judge.later`) when other parts go on.
* A topic named by id (the newer versions of Produce, Fetch, Metadata,
  OffsetCommit...) is judged by its name, as learned from the Metadata
  answers that crossed the proxy; an id the proxy has not seen named is
  answered ``UNKNOWN_TOPIC_ID`` (the client asks Metadata again, which
  teaches the proxy the name, then retries).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k00_produce as produce_m
from trafka.codec.messages import k01_fetch as fetch_m
from trafka.codec.messages import k02_list_offsets as offsets_m
from trafka.codec.messages import k03_metadata as metadata_m
from trafka.codec.messages import k08_offset_commit as commit_m
from trafka.codec.messages import k09_offset_fetch as offset_fetch_m
from trafka.codec.messages import k10_find_coordinator as coordinator_m
from trafka.codec.messages import k19_create_topics as create_m
from trafka.codec.messages import k20_delete_topics as delete_m
from trafka.codec.messages import k21_delete_records as delete_records_m
from trafka.codec.messages import k24_add_partitions_to_txn as add_partitions_m
from trafka.codec.messages import k28_txn_offset_commit as txn_commit_m
from trafka.codec.messages import k32_describe_configs as describe_configs_m
from trafka.codec.messages import k33_alter_configs as alter_configs_m
from trafka.codec.messages import k37_create_partitions as create_partitions_m
from trafka.codec.messages import k44_incremental_alter_configs as incremental_m
from trafka.codec.messages import k47_offset_delete as offset_delete_m

from .authz_groups import GROUP_HANDLERS
from .authz_more import MORE_HANDLERS
from .authz_parts import partial as _partial
from .authz_share import SHARE_HANDLERS
from .filters import CloseConnection, Respond

__all__ = ["HANDLERS", "Judge"]

NULL_ID = uuid.UUID(int=0)
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
UNKNOWN_ID = ErrorCode.UNKNOWN_TOPIC_ID


class Judge(Protocol):
    """Who asks, and what the rules say (:class:`~.authz.Authorization` makes it)."""

    def ok(self, operation: str, resource: str, name: str) -> bool: ...

    def allows(self, operation: str, resource: str, name: str) -> bool: ...

    def on_any(self, operation: str, resource: str) -> bool: ...

    def record(self, allowed: bool, operation: str, resource: str, name: str) -> None: ...

    def operations(self, resource: str, name: str) -> int: ...

    def topic_name(self, name: str | None, topic_id: uuid.UUID) -> str | None: ...

    def learn(self, name: str, topic_id: uuid.UUID) -> None: ...

    def later(self, merge: Callable[[Any], Any]) -> None: ...


Handler = Callable[[Judge, Any, int], Any]


def _topic_refusal(j: Judge, name: str | None, topic_id: uuid.UUID, operation: str) -> int:
    """0 when the topic may be ``operation``-ed; else the error Kafka gives."""
    known = j.topic_name(name, topic_id)
    if known is None:
        return UNKNOWN_ID
    return 0 if j.ok(operation, "topic", known) else TOPIC_DENIED


# -- Produce, Fetch, ListOffsets -----------------------------------------------------------


def produce(j: Judge, body: Any, version: int) -> Any:
    m = produce_m.ProduceResponse
    txn = body.transactional_id
    refused: dict[int, int] = {}  # index in topic_data -> error
    if txn is not None and not j.ok("WRITE", "transactional_id", txn):
        refused = dict.fromkeys(range(len(body.topic_data)), TXN_DENIED)
    else:
        for i, t in enumerate(body.topic_data):
            code = _topic_refusal(j, t.name, t.topic_id, "WRITE")
            if code:
                refused[i] = code
    if not refused:
        return body
    if body.acks == 0:  # Kafka closes the connection of an acks=0 Produce that failed
        raise CloseConnection("an acks=0 Produce was refused by the authorization rules")
    errors = [
        m.TopicProduceResponse(
            name=t.name,
            topic_id=t.topic_id,
            partition_responses=[
                m.PartitionProduceResponse(
                    index=p.index,
                    error_code=refused[i],
                    base_offset=-1,
                    log_append_time_ms=-1,
                    log_start_offset=-1,
                )
                for p in t.partition_data
            ],
        )
        for i, t in enumerate(body.topic_data)
        if i in refused
    ]
    keep = [t for i, t in enumerate(body.topic_data) if i not in refused]
    if not keep:
        return Respond(m(responses=errors))
    j.later(lambda r: replace(r, responses=[*r.responses, *errors]))
    return replace(body, topic_data=keep)


def fetch(j: Judge, body: Any, version: int) -> Any:
    m = fetch_m.FetchResponse
    keep, errors = [], []
    for t in body.topics:
        code = _topic_refusal(j, t.topic, t.topic_id, "READ")
        if not code:
            keep.append(t)
            continue
        errors.append(
            m.FetchableTopicResponse(
                topic=t.topic,
                topic_id=t.topic_id,
                partitions=[
                    m.PartitionData(
                        partition_index=p.partition,
                        error_code=code,
                        high_watermark=-1,
                        last_stable_offset=-1,
                        log_start_offset=-1,
                        preferred_read_replica=-1,
                        records=b"",
                    )
                    for p in t.partitions
                ],
            )
        )
    if not errors:
        return body
    if not keep and not body.forgotten_topics_data and body.session_epoch <= 0:
        return Respond(m(error_code=0, session_id=0, responses=errors))
    j.later(lambda r: replace(r, responses=[*r.responses, *errors]))
    return replace(body, topics=keep)


def list_offsets(j: Judge, body: Any, version: int) -> Any:
    m = offsets_m.ListOffsetsResponse
    keep, errors = [], []
    for t in body.topics:
        if j.ok("DESCRIBE", "topic", t.name):
            keep.append(t)
            continue
        errors.append(
            m.ListOffsetsTopicResponse(
                name=t.name,
                partitions=[
                    m.ListOffsetsPartitionResponse(
                        partition_index=p.partition_index,
                        error_code=TOPIC_DENIED,
                        timestamp=-1,
                        offset=-1,
                        leader_epoch=-1,
                    )
                    for p in t.partitions
                ],
            )
        )
    return _partial(j, body, "topics", keep, m(topics=errors), "topics", errors)


# -- Metadata --------------------------------------------------------------------------------


def metadata(j: Judge, body: Any, version: int) -> Any:
    m = metadata_m.MetadataResponse
    include_ops = bool(getattr(body, "include_topic_authorized_operations", False))
    if body.topics is None:  # every topic: those the client may not describe are left out
        j.later(lambda r: _metadata_answer(j, r, include_ops, set(), True))
        return body
    keep, errors, no_create = [], [], set()
    auto = body.allow_auto_topic_creation
    for t in body.topics:
        if t.name is None:  # by id: judged on the answer, by the name it gives
            keep.append(t)
            continue
        if not j.ok("DESCRIBE", "topic", t.name):
            errors.append(m.MetadataResponseTopic(error_code=TOPIC_DENIED, name=t.name))
            continue
        keep.append(t)
        if auto and not (
            j.allows("CREATE", "cluster", "kafka-cluster") or j.ok("CREATE", "topic", t.name)
        ):
            no_create.add(t.name)
    j.later(lambda r: _metadata_answer(j, r, include_ops, no_create, False, errors))
    if not errors and not no_create:
        return body
    # A topic the client may not create must not be created for it: no topic
    # of this request is, then (the others are on the client's next asking).
    return replace(body, topics=keep, allow_auto_topic_creation=auto and not no_create)


def _metadata_answer(
    j: Judge,
    r: Any,
    include_ops: bool,
    no_create: set[str],
    every: bool,
    errors: list[Any] = (),  # type: ignore[assignment]
) -> Any:
    m = metadata_m.MetadataResponse
    topics = []
    for t in r.topics:
        if t.name and t.topic_id != NULL_ID:
            j.learn(t.name, t.topic_id)
        if t.name and not j.ok("DESCRIBE", "topic", t.name):
            if every:
                continue
            topics.append(
                m.MetadataResponseTopic(error_code=TOPIC_DENIED, name=None, topic_id=t.topic_id)
            )
            continue
        if t.name in no_create and t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            t = replace(t, error_code=TOPIC_DENIED)
        elif include_ops and t.name and t.topic_authorized_operations != -(2**31):
            allowed = j.operations("topic", t.name)
            t = replace(t, topic_authorized_operations=t.topic_authorized_operations & allowed)
        topics.append(t)
    return replace(r, topics=[*topics, *errors])


# -- groups' offsets, transactions -------------------------------------------------------------


def offset_commit(j: Judge, body: Any, version: int) -> Any:
    m = commit_m.OffsetCommitResponse
    group_ok = j.ok("READ", "group", body.group_id)
    keep, errors = [], []
    for t in body.topics:
        code = GROUP_DENIED if not group_ok else _topic_refusal(j, t.name, t.topic_id, "READ")
        if not code:
            keep.append(t)
            continue
        errors.append(
            m.OffsetCommitResponseTopic(
                name=t.name,
                topic_id=t.topic_id,
                partitions=[
                    m.OffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=code
                    )
                    for p in t.partitions
                ],
            )
        )
    if not group_ok and not body.topics:
        return Respond(m(topics=[]))
    return _partial(j, body, "topics", keep, m(topics=errors), "topics", errors)


def txn_offset_commit(j: Judge, body: Any, version: int) -> Any:
    m = txn_commit_m.TxnOffsetCommitResponse
    if not j.ok("WRITE", "transactional_id", body.transactional_id):
        whole: int | None = TXN_DENIED
    elif not j.ok("READ", "group", body.group_id):
        whole = GROUP_DENIED
    else:
        whole = None
    keep, errors = [], []
    for t in body.topics:
        code = whole if whole is not None else _topic_refusal(j, t.name, t.topic_id, "READ")
        if not code:
            keep.append(t)
            continue
        errors.append(
            m.TxnOffsetCommitResponseTopic(
                name=t.name,
                topic_id=t.topic_id,
                partitions=[
                    m.TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=code
                    )
                    for p in t.partitions
                ],
            )
        )
    return _partial(j, body, "topics", keep, m(topics=errors), "topics", errors)


def add_partitions_to_txn(j: Judge, body: Any, version: int) -> Any:
    m = add_partitions_m.AddPartitionsToTxnResponse
    if version >= 4:  # the brokers' own (verify_only), KIP-890
        if j.ok("CLUSTER_ACTION", "cluster", "kafka-cluster"):
            return body
        return Respond(m(error_code=CLUSTER_DENIED))
    topics = body.v3_and_below_topics
    refused: dict[str, int] = {}
    if not j.ok("WRITE", "transactional_id", body.v3_and_below_transactional_id):
        refused = {t.name: TXN_DENIED for t in topics}
    else:
        refused = {t.name: TOPIC_DENIED for t in topics if not j.ok("WRITE", "topic", t.name)}
    if not refused:
        return body
    results = [
        m.AddPartitionsToTxnTopicResult(
            name=t.name,
            results_by_partition=[
                m.AddPartitionsToTxnPartitionResult(
                    partition_index=p,
                    partition_error_code=refused.get(t.name, ErrorCode.OPERATION_NOT_ATTEMPTED),
                )
                for p in t.partitions
            ],
        )
        for t in topics
    ]
    return Respond(m(results_by_topic_v3_and_below=results))


def offset_fetch(j: Judge, body: Any, version: int) -> Any:
    m = offset_fetch_m.OffsetFetchResponse
    if version < 8:
        if not j.ok("DESCRIBE", "group", body.group_id):
            return Respond(m(error_code=GROUP_DENIED, topics=[]))
        j.later(lambda r: replace(r, topics=_fetched(j, r.topics, body.topics, m, False)))
        return body
    denied = [g for g in body.groups if not j.ok("DESCRIBE", "group", g.group_id)]
    groups = {g.group_id: g for g in body.groups}

    def merge(r: Any) -> Any:
        out = [
            replace(g, topics=_fetched(j, g.topics, groups[g.group_id].topics, m, True))
            if g.group_id in groups
            else g
            for g in r.groups
        ]
        refusals = [
            m.OffsetFetchResponseGroup(group_id=g.group_id, error_code=GROUP_DENIED) for g in denied
        ]
        return replace(r, groups=[*out, *refusals])

    keep = [g for g in body.groups if g not in denied]
    if not keep:
        return Respond(m(groups=merge(m(groups=[])).groups))
    j.later(merge)
    return replace(body, groups=keep) if denied else body


def _fetched(j: Judge, topics: list[Any], asked: Any, m: Any, grouped: bool) -> list[Any]:
    """An OffsetFetch answer's topics: those the client may not describe left
    out (it asked for every one) or refused (it named them)."""
    out = []
    for t in topics:
        name = j.topic_name(t.name, getattr(t, "topic_id", NULL_ID))
        if name is not None and j.ok("DESCRIBE", "topic", name):
            out.append(t)
        elif asked is not None:
            part = m.OffsetFetchResponsePartitions if grouped else m.OffsetFetchResponsePartition
            out.append(
                replace(
                    t,
                    partitions=[
                        part(
                            partition_index=p.partition_index,
                            committed_offset=-1,
                            committed_leader_epoch=-1,
                            metadata="",
                            error_code=TOPIC_DENIED,
                        )
                        for p in t.partitions
                    ],
                )
            )
    return out


def find_coordinator(j: Judge, body: Any, version: int) -> Any:
    m = coordinator_m.FindCoordinatorResponse
    resource, code = (
        ("transactional_id", TXN_DENIED) if body.key_type == 1 else ("group", GROUP_DENIED)
    )
    if version < 4:
        if j.ok("DESCRIBE", resource, body.key):
            return body
        return Respond(m(error_code=code, node_id=-1, host="", port=-1))
    keep = [k for k in body.coordinator_keys if j.ok("DESCRIBE", resource, k)]
    errors = [
        m.Coordinator(key=k, node_id=-1, host="", port=-1, error_code=code)
        for k in body.coordinator_keys
        if k not in keep
    ]
    return _partial(
        j, body, "coordinator_keys", keep, m(coordinators=errors), "coordinators", errors
    )


# -- admin ------------------------------------------------------------------------------------


def create_topics(j: Judge, body: Any, version: int) -> Any:
    m = create_m.CreateTopicsResponse
    cluster = j.allows("CREATE", "cluster", "kafka-cluster")
    if cluster:
        j.record(True, "CREATE", "cluster", "kafka-cluster")
    keep = [t for t in body.topics if cluster or j.ok("CREATE", "topic", t.name)]
    errors = [
        m.CreatableTopicResult(
            name=t.name,
            error_code=TOPIC_DENIED,
            error_message="Authorization failed.",
            num_partitions=-1,
            replication_factor=-1,
        )
        for t in body.topics
        if t not in keep
    ]

    def configs(r: Any) -> Any:
        out = []
        for t in r.topics:
            if t.name and t.topic_id != NULL_ID:
                j.learn(t.name, t.topic_id)
            if t.error_code == 0 and not j.ok("DESCRIBE_CONFIGS", "topic", t.name):
                t = replace(t, topic_config_error_code=TOPIC_DENIED, configs=[])
            out.append(t)
        return replace(r, topics=out)

    j.later(configs)
    return _partial(j, body, "topics", keep, m(topics=errors), "topics", errors)


def delete_topics(j: Judge, body: Any, version: int) -> Any:
    m = delete_m.DeleteTopicsResponse
    if version < 6:
        keep = [n for n in body.topic_names if j.ok("DELETE", "topic", n)]
        errors = [
            m.DeletableTopicResult(
                name=n, error_code=TOPIC_DENIED, error_message=_message(TOPIC_DENIED)
            )
            for n in body.topic_names
            if n not in keep
        ]
        return _partial(j, body, "topic_names", keep, m(responses=errors), "responses", errors)
    keep, errors = [], []
    for t in body.topics:
        known = j.topic_name(t.name, t.topic_id)
        code: int
        if known is None:
            code = UNKNOWN_ID
        elif not j.ok("DESCRIBE", "topic", known) and t.name is None:
            code = UNKNOWN_ID  # an id the client may not see stays unknown to it
        else:
            code = 0 if j.ok("DELETE", "topic", known) else TOPIC_DENIED
        if not code:
            keep.append(t)
        else:
            errors.append(
                m.DeletableTopicResult(
                    name=t.name, topic_id=t.topic_id, error_code=code, error_message=_message(code)
                )
            )
    return _partial(j, body, "topics", keep, m(responses=errors), "responses", errors)


def delete_records(j: Judge, body: Any, version: int) -> Any:
    m = delete_records_m.DeleteRecordsResponse
    keep, errors = [], []
    for t in body.topics:
        if j.ok("DELETE", "topic", t.name):
            keep.append(t)
            continue
        errors.append(
            m.DeleteRecordsTopicResult(
                name=t.name,
                partitions=[
                    m.DeleteRecordsPartitionResult(
                        partition_index=p.partition_index, low_watermark=-1, error_code=TOPIC_DENIED
                    )
                    for p in t.partitions
                ],
            )
        )
    return _partial(j, body, "topics", keep, m(topics=errors), "topics", errors)


def create_partitions(j: Judge, body: Any, version: int) -> Any:
    m = create_partitions_m.CreatePartitionsResponse
    keep = [t for t in body.topics if j.ok("ALTER", "topic", t.name)]
    errors = [
        m.CreatePartitionsTopicResult(name=t.name, error_code=TOPIC_DENIED, error_message=None)
        for t in body.topics
        if t not in keep
    ]
    return _partial(j, body, "topics", keep, m(results=errors), "results", errors)


# Config resource types (Kafka's ConfigResource.Type): what each is judged on.
_CONFIG_TYPES = {
    2: ("topic", TOPIC_DENIED),
    4: ("cluster", CLUSTER_DENIED),
    8: ("cluster", CLUSTER_DENIED),
    16: ("cluster", CLUSTER_DENIED),
    32: ("group", GROUP_DENIED),
}


def _config_refusal(j: Judge, operation: str, kind: int, name: str) -> int:
    resource, code = _CONFIG_TYPES.get(kind, ("cluster", CLUSTER_DENIED))
    return (
        0 if j.ok(operation, resource, "kafka-cluster" if resource == "cluster" else name) else code
    )


def describe_configs(j: Judge, body: Any, version: int) -> Any:
    m = describe_configs_m.DescribeConfigsResponse
    keep, errors = [], []
    for res in body.resources:
        code = _config_refusal(j, "DESCRIBE_CONFIGS", res.resource_type, res.resource_name)
        if not code:
            keep.append(res)
            continue
        errors.append(
            m.DescribeConfigsResult(
                error_code=code,
                error_message=_message(code),
                resource_type=res.resource_type,
                resource_name=res.resource_name,
                configs=[],
            )
        )
    return _partial(j, body, "resources", keep, m(results=errors), "results", errors)


def alter_configs(j: Judge, body: Any, version: int, m: Any) -> Any:
    keep, errors = [], []
    for res in body.resources:
        code = _config_refusal(j, "ALTER_CONFIGS", res.resource_type, res.resource_name)
        if not code:
            keep.append(res)
            continue
        errors.append(
            m.AlterConfigsResourceResponse(
                error_code=code,
                error_message=_message(code),
                resource_type=res.resource_type,
                resource_name=res.resource_name,
            )
        )
    return _partial(j, body, "resources", keep, m(responses=errors), "responses", errors)


def offset_delete(j: Judge, body: Any, version: int) -> Any:
    m = offset_delete_m.OffsetDeleteResponse
    if not j.ok("DELETE", "group", body.group_id):
        return Respond(m(error_code=GROUP_DENIED, topics=[]))
    keep, errors = [], []
    for t in body.topics:
        if j.ok("READ", "topic", t.name):
            keep.append(t)
            continue
        errors.append(
            m.OffsetDeleteResponseTopic(
                name=t.name,
                partitions=[
                    m.OffsetDeleteResponsePartition(
                        partition_index=p.partition_index, error_code=TOPIC_DENIED
                    )
                    for p in t.partitions
                ],
            )
        )
    return _partial(j, body, "topics", keep, m(error_code=0, topics=errors), "topics", errors)


def _message(code: int) -> str:
    """The message Kafka gives with a refusal (its Errors' default message)."""
    messages: dict[int, str] = {
        TOPIC_DENIED: "Topic authorization failed.",
        GROUP_DENIED: "Group authorization failed.",
        CLUSTER_DENIED: "Cluster authorization failed.",
        TXN_DENIED: "Transactional Id authorization failed.",
    }
    return messages.get(code, "")


def _alter(response: Any) -> Handler:
    return lambda j, body, version: alter_configs(j, body, version, response)


HANDLERS: dict[int, Handler] = {
    ApiKey.PRODUCE: produce,
    ApiKey.FETCH: fetch,
    ApiKey.LIST_OFFSETS: list_offsets,
    ApiKey.METADATA: metadata,
    ApiKey.OFFSET_COMMIT: offset_commit,
    ApiKey.OFFSET_FETCH: offset_fetch,
    ApiKey.FIND_COORDINATOR: find_coordinator,
    ApiKey.TXN_OFFSET_COMMIT: txn_offset_commit,
    ApiKey.ADD_PARTITIONS_TO_TXN: add_partitions_to_txn,
    ApiKey.CREATE_TOPICS: create_topics,
    ApiKey.DELETE_TOPICS: delete_topics,
    ApiKey.DELETE_RECORDS: delete_records,
    ApiKey.CREATE_PARTITIONS: create_partitions,
    ApiKey.DESCRIBE_CONFIGS: describe_configs,
    ApiKey.ALTER_CONFIGS: _alter(alter_configs_m.AlterConfigsResponse),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _alter(incremental_m.IncrementalAlterConfigsResponse),
    ApiKey.OFFSET_DELETE: offset_delete,
    **GROUP_HANDLERS,
    **MORE_HANDLERS,
    **SHARE_HANDLERS,
}
