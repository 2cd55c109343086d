"""Where each API a tenant may use names topics, groups and transactional ids,
and how the tenants filter (:mod:`.tenants`) rewrites them: I/O-free.

Rules:

* A request's names get the tenant's prefix (:data:`REQUEST_NAMES`, paths of
  fields through the codec's dataclasses, lists crossed): a tenant names only
  resources under its prefix, so another tenant's resource is one it cannot
  name (the broker answers it as a resource that does not exist).
* An answer's names lose the prefix (:data:`ANSWER_NAMES`); an element of a
  list whose name lacks the prefix (another tenant's, or the cluster's own,
  in a listing: Metadata of every topic, ListGroups) is left out.
* Topic ids (the newer versions of Fetch, Produce, OffsetCommit, Metadata...)
  cannot carry a prefix: an id the proxy has not seen name one of the
  tenant's topics (in a Metadata or CreateTopics answer) is replaced, on its
  way to the broker, by a fresh id no topic has, so that the broker answers
  it UNKNOWN_TOPIC_ID as it would an id that does not exist; the answer gives
  the client its own id back (:func:`hide_ids`, :func:`restore_ids`). A
  client meeting UNKNOWN_TOPIC_ID asks Metadata again, which teaches the
  proxy the id.
* A regular expression of topics (ConsumerGroupHeartbeat, KIP-848) is matched
  by the broker against whole names: it is anchored behind the escaped prefix.
* A streams group (KIP-1071) names topics throughout its topology: each
  subtopology's source topics, repartition sink and source topics, state
  changelog topics (:data:`STREAMS_TOPOLOGY`), and in the topology
  description's nodes (KIP-1331: :data:`STREAMS_DESCRIPTION`); its source
  topic regexes are anchored behind the prefix as a consumer's are. The
  copartition groups name topics by their place in those lists, which
  prefixing keeps. Its members' tasks name subtopologies, not topics; a
  heartbeat answer's status details name the group's topics, shown without
  the prefix as error messages are.
* DescribeConfigs names topics, groups and brokers: only topics and groups
  are prefixed; a broker's configs name no tenant's resource and pass. A
  change to a broker's configs (AlterConfigs, IncrementalAlterConfigs) is a
  change to every tenant's cluster: refused CLUSTER_AUTHORIZATION_FAILED.
* DescribeTopicPartitions of every topic pages with a cursor naming the next
  topic: the tenant's listing ends where the broker's next topic is not the
  tenant's (ask by name, as admin clients do, for the rest).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from trafka.codec import ApiKey

__all__ = [
    "ANSWER_NAMES",
    "CONFIG_APIS",
    "PASSING",
    "REQUEST_NAMES",
    "SERVED",
    "STREAMS_REGEXES",
    "hide_ids",
    "map_names",
    "restore_ids",
]

NULL_ID = uuid.UUID(int=0)

# A streams group's topology (KIP-1071), in StreamsGroupHeartbeat's request and
# StreamsGroupDescribe's answer: the fields under a subtopology naming topics.
STREAMS_TOPOLOGY: tuple[tuple[str, ...], ...] = (
    ("source_topics",),
    ("repartition_sink_topics",),
    ("state_changelog_topics", "name"),
    ("repartition_source_topics", "name"),
)
# Its description (KIP-1331): the fields naming topics, under a subtopology's
# nodes, and under each global store's two nodes.
_NODE: tuple[tuple[str, ...], ...] = (("source_topics",), ("sink_topic",))
STREAMS_DESCRIPTION: tuple[tuple[str, ...], ...] = (
    *(("subtopologies", "nodes", *p) for p in _NODE),
    *(("global_stores", end, *p) for end in ("source", "processor") for p in _NODE),
)
# Regexes of source topics (anchored behind the prefix: regex_within).
STREAMS_REGEXES: tuple[tuple[str, ...], ...] = (
    ("topology", "subtopologies", "source_topic_regex"),
)


def _under(
    head: tuple[str, ...], paths: tuple[tuple[str, ...], ...]
) -> tuple[tuple[str, ...], ...]:
    return tuple((*head, *p) for p in paths)


# API -> paths of fields (lists crossed) that hold a topic name, group id or
# transactional id, in the request.
REQUEST_NAMES: dict[int, tuple[tuple[str, ...], ...]] = {
    ApiKey.PRODUCE: (("transactional_id",), ("topic_data", "name")),
    ApiKey.FETCH: (("topics", "topic"), ("forgotten_topics_data", "topic")),
    ApiKey.LIST_OFFSETS: (("topics", "name"),),
    ApiKey.METADATA: (("topics", "name"),),
    ApiKey.OFFSET_COMMIT: (("group_id",), ("topics", "name")),
    ApiKey.OFFSET_FETCH: (
        ("group_id",),
        ("topics", "name"),
        ("groups", "group_id"),
        ("groups", "topics", "name"),
    ),
    ApiKey.FIND_COORDINATOR: (("key",), ("coordinator_keys",)),
    ApiKey.JOIN_GROUP: (("group_id",),),
    ApiKey.HEARTBEAT: (("group_id",),),
    ApiKey.LEAVE_GROUP: (("group_id",),),
    ApiKey.SYNC_GROUP: (("group_id",),),
    ApiKey.DESCRIBE_GROUPS: (("groups",),),
    ApiKey.LIST_GROUPS: (),
    ApiKey.CREATE_TOPICS: (("topics", "name"),),
    ApiKey.DELETE_TOPICS: (("topics", "name"), ("topic_names",)),
    ApiKey.DELETE_RECORDS: (("topics", "name"),),
    ApiKey.INIT_PRODUCER_ID: (("transactional_id",),),
    ApiKey.ADD_PARTITIONS_TO_TXN: (
        ("v3_and_below_transactional_id",),
        ("v3_and_below_topics", "name"),
        ("transactions", "transactional_id"),
        ("transactions", "topics", "name"),
    ),
    ApiKey.ADD_OFFSETS_TO_TXN: (("transactional_id",), ("group_id",)),
    ApiKey.END_TXN: (("transactional_id",),),
    ApiKey.TXN_OFFSET_COMMIT: (("transactional_id",), ("group_id",), ("topics", "name")),
    ApiKey.DESCRIBE_CONFIGS: (),  # by resource type: see describe_configs_request
    ApiKey.CREATE_PARTITIONS: (("topics", "name"),),
    ApiKey.DELETE_GROUPS: (("groups_names",),),
    ApiKey.OFFSET_DELETE: (("group_id",), ("topics", "name")),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (("group_id",), ("subscribed_topic_names",)),
    ApiKey.DESCRIBE_TRANSACTIONS: (("transactional_ids",),),
    ApiKey.LIST_TRANSACTIONS: (),  # a pattern: see regex_within
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (("topics", "topic"),),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (("topics", "name"), ("cursor", "topic_name")),
    ApiKey.DESCRIBE_PRODUCERS: (("topics", "name"),),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (("group_ids",),),
    ApiKey.ALTER_CONFIGS: (),  # by resource type: see CONFIG_APIS
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (),
    # Share groups (KIP-932): their fetches and acknowledgements name topics by id.
    ApiKey.SHARE_GROUP_HEARTBEAT: (("group_id",), ("subscribed_topic_names",)),
    ApiKey.SHARE_GROUP_DESCRIBE: (("group_ids",),),
    ApiKey.SHARE_FETCH: (("group_id",),),
    ApiKey.SHARE_ACKNOWLEDGE: (("group_id",),),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (
        ("groups", "group_id"),
        ("groups", "topics", "topic_name"),
    ),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: (("group_id",), ("topics", "topic_name")),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: (("group_id",), ("topics", "topic_name")),
    # Streams groups (KIP-1071): their regexes, see STREAMS_REGEXES.
    ApiKey.STREAMS_GROUP_HEARTBEAT: (
        ("group_id",),
        *_under(("topology", "subtopologies"), STREAMS_TOPOLOGY),
    ),
    ApiKey.STREAMS_GROUP_DESCRIBE: (("group_ids",),),
    ApiKey.STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE: (
        ("group_id",),
        *_under(("topology_description",), STREAMS_DESCRIPTION),
    ),
}

# The same in the answers (names stripped of the prefix; see the rules).
ANSWER_NAMES: dict[int, tuple[tuple[str, ...], ...]] = {
    ApiKey.PRODUCE: (("responses", "name"),),
    ApiKey.FETCH: (("responses", "topic"),),
    ApiKey.LIST_OFFSETS: (("topics", "name"),),
    ApiKey.METADATA: (),  # see metadata_answer
    ApiKey.OFFSET_COMMIT: (("topics", "name"),),
    ApiKey.OFFSET_FETCH: (
        ("topics", "name"),
        ("groups", "group_id"),
        ("groups", "topics", "name"),
    ),
    ApiKey.FIND_COORDINATOR: (("coordinators", "key"),),
    ApiKey.DESCRIBE_GROUPS: (("groups", "group_id"),),
    ApiKey.LIST_GROUPS: (("groups", "group_id"),),
    ApiKey.CREATE_TOPICS: (("topics", "name"),),
    ApiKey.DELETE_TOPICS: (("responses", "name"),),
    ApiKey.DELETE_RECORDS: (("topics", "name"),),
    ApiKey.ADD_PARTITIONS_TO_TXN: (
        ("results_by_topic_v3_and_below", "name"),
        ("results_by_transaction", "transactional_id"),
        ("results_by_transaction", "topic_results", "name"),
    ),
    ApiKey.TXN_OFFSET_COMMIT: (("topics", "name"),),
    ApiKey.CREATE_PARTITIONS: (("results", "name"),),
    ApiKey.DELETE_GROUPS: (("results", "group_id"),),
    ApiKey.OFFSET_DELETE: (("topics", "name"),),
    ApiKey.DESCRIBE_TRANSACTIONS: (
        ("transaction_states", "transactional_id"),
        ("transaction_states", "topics", "topic"),
    ),
    ApiKey.LIST_TRANSACTIONS: (("transaction_states", "transactional_id"),),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (("topics", "topic"),),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (("topics", "name"), ("next_cursor", "topic_name")),
    ApiKey.DESCRIBE_PRODUCERS: (("topics", "name"),),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (
        ("groups", "group_id"),
        ("groups", "members", "subscribed_topic_names"),
        ("groups", "members", "assignment", "topic_partitions", "topic_name"),
        ("groups", "members", "target_assignment", "topic_partitions", "topic_name"),
    ),
    ApiKey.SHARE_GROUP_DESCRIBE: (
        ("groups", "group_id"),
        ("groups", "members", "subscribed_topic_names"),
        ("groups", "members", "assignment", "topic_partitions", "topic_name"),
    ),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (
        ("groups", "group_id"),
        ("groups", "topics", "topic_name"),
    ),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: (("responses", "topic_name"),),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: (("responses", "topic_name"),),
    ApiKey.STREAMS_GROUP_HEARTBEAT: (
        ("partitions_by_user_endpoint", "active_partitions", "topic"),
        ("partitions_by_user_endpoint", "standby_partitions", "topic"),
    ),
    ApiKey.STREAMS_GROUP_DESCRIBE: (
        ("groups", "group_id"),
        *_under(("groups", "topology", "subtopologies"), STREAMS_TOPOLOGY),
        *_under(("groups", "topology_description"), STREAMS_DESCRIPTION),
    ),
}

# The config APIs: (the request's list of resources, the answer's), named by
# resource type (only topics and groups are a tenant's).
CONFIG_APIS: dict[int, tuple[str, str]] = {
    ApiKey.DESCRIBE_CONFIGS: ("resources", "results"),
    ApiKey.ALTER_CONFIGS: ("resources", "responses"),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: ("resources", "responses"),
}

# Fields that hold topic ids, in requests and in answers.
REQUEST_IDS: dict[int, tuple[tuple[str, ...], ...]] = {
    ApiKey.PRODUCE: (("topic_data", "topic_id"),),
    ApiKey.FETCH: (("topics", "topic_id"), ("forgotten_topics_data", "topic_id")),
    ApiKey.METADATA: (("topics", "topic_id"),),
    ApiKey.OFFSET_COMMIT: (("topics", "topic_id"),),
    ApiKey.OFFSET_FETCH: (("groups", "topics", "topic_id"),),
    ApiKey.TXN_OFFSET_COMMIT: (("topics", "topic_id"),),
    ApiKey.DELETE_TOPICS: (("topics", "topic_id"),),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (("topic_partitions", "topic_id"),),
    ApiKey.SHARE_FETCH: (("topics", "topic_id"), ("forgotten_topics_data", "topic_id")),
    ApiKey.SHARE_ACKNOWLEDGE: (("topics", "topic_id"),),
}
ANSWER_IDS: dict[int, tuple[tuple[str, ...], ...]] = {
    ApiKey.PRODUCE: (("responses", "topic_id"),),
    ApiKey.FETCH: (("responses", "topic_id"),),
    ApiKey.METADATA: (("topics", "topic_id"),),
    ApiKey.OFFSET_COMMIT: (("topics", "topic_id"),),
    ApiKey.OFFSET_FETCH: (("groups", "topics", "topic_id"),),
    ApiKey.TXN_OFFSET_COMMIT: (("topics", "topic_id"),),
    ApiKey.DELETE_TOPICS: (("responses", "topic_id"),),
    ApiKey.SHARE_FETCH: (("responses", "topic_id"),),
    ApiKey.SHARE_ACKNOWLEDGE: (("responses", "topic_id"),),
}

# The APIs a tenant may use: their names rewritten both ways.
SERVED = frozenset(REQUEST_NAMES)
# The APIs that name no tenant's resource: they pass as they are.
PASSING = frozenset(
    {
        ApiKey.API_VERSIONS,
        ApiKey.SASL_HANDSHAKE,
        ApiKey.SASL_AUTHENTICATE,
        ApiKey.DESCRIBE_CLUSTER,
        ApiKey.GET_TELEMETRY_SUBSCRIPTIONS,
        ApiKey.PUSH_TELEMETRY,
    }
)

# DescribeConfigs resource types named by a tenant's prefix (Kafka's ConfigResource.Type).
TOPIC_RESOURCE = 2
GROUP_RESOURCE = 32
NAMED_RESOURCES = frozenset({TOPIC_RESOURCE, GROUP_RESOURCE})

_DROP = object()


def map_names(
    body: Any, paths: tuple[tuple[str, ...], ...], fn: Callable[[str], str | None]
) -> Any:
    """``body`` with every name at ``paths`` replaced by ``fn(name)``; where
    ``fn`` gives None, the list element holding the name is left out (a name
    outside a list is then kept as it was). Empty and null names are kept."""
    for path in paths:
        out = _apply(body, path, fn)
        if out is not _DROP:
            body = out
    return body


def _apply(obj: Any, path: tuple[str, ...], fn: Callable[[str], str | None]) -> Any:
    field = path[0]
    value = getattr(obj, field, None)
    if value is None:
        return obj
    if len(path) == 1:
        if isinstance(value, list):
            return replace(
                obj, **{field: [n for v in value if v for n in [fn(v)] if n is not None]}
            )
        if value == "":
            return obj
        new = fn(value)
        return _DROP if new is None else replace(obj, **{field: new})
    if isinstance(value, list):
        kept = [out for item in value for out in [_apply(item, path[1:], fn)] if out is not _DROP]
        return replace(obj, **{field: kept})
    out = _apply(value, path[1:], fn)
    return _DROP if out is _DROP else replace(obj, **{field: out})


def _map_ids(
    body: Any, paths: tuple[tuple[str, ...], ...], fn: Callable[[uuid.UUID], uuid.UUID]
) -> Any:
    def one(obj: Any, path: tuple[str, ...]) -> Any:
        value = getattr(obj, path[0], None)
        if value is None:
            return obj
        if len(path) == 1:
            return obj if value == NULL_ID else replace(obj, **{path[0]: fn(value)})
        if isinstance(value, list):
            return replace(obj, **{path[0]: [one(item, path[1:]) for item in value]})
        return replace(obj, **{path[0]: one(value, path[1:])})

    for path in paths:
        body = one(body, path)
    return body


def hide_ids(
    api_key: int, body: Any, owned: Callable[[uuid.UUID], bool], swapped: dict[uuid.UUID, uuid.UUID]
) -> Any:
    """``body`` with each topic id that is not ``owned`` replaced by a fresh
    one (noted in ``swapped``: fresh -> the client's)."""
    paths = REQUEST_IDS.get(api_key)
    if not paths:
        return body

    def swap(topic_id: uuid.UUID) -> uuid.UUID:
        if owned(topic_id):
            return topic_id
        fresh = uuid.uuid4()
        swapped[fresh] = topic_id
        return fresh

    return _map_ids(body, paths, swap)


def restore_ids(api_key: int, body: Any, swapped: dict[uuid.UUID, uuid.UUID]) -> Any:
    """An answer naming the client's own ids where :func:`hide_ids` swapped them."""
    paths = ANSWER_IDS.get(api_key)
    if not paths or not swapped:
        return body
    return _map_ids(body, paths, lambda i: swapped.get(i, i))


def regex_within(prefix: str, regex: str) -> str:
    """A regex of names (RE2, matched against whole names) that matches only
    names under ``prefix`` whose rest ``regex`` matches."""
    return _escaped(prefix) + "(?:" + regex + ")"


def regex_shown(prefix: str, regex: str) -> str:
    """The tenant's regex back from :func:`regex_within`'s."""
    head = _escaped(prefix) + "(?:"
    if regex.startswith(head) and regex.endswith(")"):
        return regex[len(head) : -1]
    return regex


def _escaped(prefix: str) -> str:
    # A prefix is letters, digits, '.', '_' and '-': only '.' means more in RE2.
    return prefix.replace(".", "\\.")
