"""The proxy's authorization of the APIs that describe topics' partitions,
producers and transactions (see :mod:`.authz_apis`' rules): what Kafka checks
and answers for each.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k23_offset_for_leader_epoch as epoch_m
from trafka.codec.messages import k61_describe_producers as producers_m
from trafka.codec.messages import k65_describe_transactions as describe_txn_m
from trafka.codec.messages import k75_describe_topic_partitions as partitions_m
from trafka.codec.messages import k77_share_group_describe as share_describe_m

from .authz_parts import OMITTED, described_groups
from .authz_parts import partial as _partial
from .filters import Respond

__all__ = ["MORE_HANDLERS"]

TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
NULL_ID = uuid.UUID(int=0)


def describe_topic_partitions(j: Any, body: Any, version: int) -> Any:
    m = partitions_m.DescribeTopicPartitionsResponse
    every = not body.topics

    def answered(r: Any, errors: list[Any]) -> Any:
        topics = []
        for t in r.topics:
            if t.name and t.topic_id != NULL_ID:
                j.learn(t.name, t.topic_id)
            if every and t.name and not j.ok("DESCRIBE", "topic", t.name):
                continue  # every topic was asked for: those not describable are left out
            if t.name and t.topic_authorized_operations != OMITTED:
                allowed = j.operations("topic", t.name)
                t = replace(t, topic_authorized_operations=t.topic_authorized_operations & allowed)
            topics.append(t)
        return replace(r, topics=[*topics, *errors])

    if every:
        j.later(lambda r: answered(r, []))
        return body
    keep = [t for t in body.topics if j.ok("DESCRIBE", "topic", t.name)]
    errors = [
        m.DescribeTopicPartitionsResponseTopic(
            error_code=TOPIC_DENIED, name=t.name, topic_id=NULL_ID, is_internal=False
        )
        for t in body.topics
        if t not in keep
    ]
    if not keep:
        return Respond(m(topics=errors, next_cursor=None))
    j.later(lambda r: answered(r, errors))
    return replace(body, topics=keep) if errors else body


def offset_for_leader_epoch(j: Any, body: Any, version: int) -> Any:
    if body.replica_id >= 0:  # a follower's: the brokers' own
        return body
    m = epoch_m.OffsetForLeaderEpochResponse
    keep, errors = [], []
    for t in body.topics:
        if j.ok("DESCRIBE", "topic", t.topic):
            keep.append(t)
            continue
        errors.append(
            m.OffsetForLeaderTopicResult(
                topic=t.topic,
                partitions=[
                    m.EpochEndOffset(
                        error_code=TOPIC_DENIED, partition=p.partition, leader_epoch=-1,
                        end_offset=-1,
                    )
                    for p in t.partitions
                ],
            )
        )  # fmt: skip
    return _partial(j, body, "topics", keep, m(topics=errors), "topics", errors)


def describe_producers(j: Any, body: Any, version: int) -> Any:
    m = producers_m.DescribeProducersResponse
    keep, errors = [], []
    for t in body.topics:
        if j.ok("READ", "topic", t.name):
            keep.append(t)
            continue
        errors.append(
            m.TopicResponse(
                name=t.name,
                partitions=[
                    m.PartitionResponse(
                        partition_index=p,
                        error_code=TOPIC_DENIED,
                        error_message="Topic authorization failed.",
                    )
                    for p in t.partition_indexes
                ],
            )
        )
    return _partial(j, body, "topics", keep, m(topics=errors), "topics", errors)


def describe_transactions(j: Any, body: Any, version: int) -> Any:
    m = describe_txn_m.DescribeTransactionsResponse
    keep = [t for t in body.transactional_ids if j.ok("DESCRIBE", "transactional_id", t)]
    errors = [
        m.TransactionState(error_code=TXN_DENIED, transactional_id=t)
        for t in body.transactional_ids
        if t not in keep
    ]

    def topics_seen(r: Any) -> Any:
        states = [
            replace(s, topics=[t for t in s.topics if j.ok("DESCRIBE", "topic", t.topic)])
            for s in r.transaction_states
        ]
        return replace(r, transaction_states=[*states, *errors])

    if not keep:
        return Respond(m(transaction_states=errors))
    j.later(topics_seen)
    return replace(body, transactional_ids=keep) if errors else body


def list_transactions(j: Any, body: Any, version: int) -> Any:
    j.later(
        lambda r: replace(
            r,
            transaction_states=[
                s
                for s in r.transaction_states
                if j.ok("DESCRIBE", "transactional_id", s.transactional_id)
            ],
        )
    )
    return body


def share_group_describe(j: Any, body: Any, version: int) -> Any:
    return described_groups(j, body, share_describe_m.ShareGroupDescribeResponse)


MORE_HANDLERS: dict[int, Callable[[Any, Any, int], Any]] = {
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: describe_topic_partitions,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: offset_for_leader_epoch,
    ApiKey.DESCRIBE_PRODUCERS: describe_producers,
    ApiKey.DESCRIBE_TRANSACTIONS: describe_transactions,
    ApiKey.LIST_TRANSACTIONS: list_transactions,
    ApiKey.SHARE_GROUP_DESCRIBE: share_group_describe,
}
