"""An admin service: create topics, read the cluster's metadata, describe and
alter topic configs (``incremental_alter_configs`` and ``alter_configs``), add
partitions, give a group offsets, list and describe groups, describe the
cluster, then delete what it made (the calls of confluent-kafka's admin example).

    python examples/confluent/admin.py --lib trafka -b localhost:9092 -t audit -g audit-readers

Makes ``<prefix>-compacted`` (3 partitions, ``cleanup.policy=compact``) and
``<prefix>-plain`` (2 partitions), and prints what each call answers.

A broker may apply a topic change after answering the call that made it
(Kafka's KRaft brokers apply the controller's records as they reach them), so
the service reads a change back until it shows (:func:`settled`) before it
prints it.
"""

from __future__ import annotations

import time

import clientlib

#: The topic configs printed (the rest depends on the broker's defaults).
SHOWN = ("cleanup.policy", "retention.ms", "max.message.bytes")


def results(futures):
    """Each future's result by its key, in key order (raises the first failure)."""
    return {key: futures[key].result() for key in sorted(futures, key=str)}


def settled(read, shows, errors, attempts=100):
    """``read()`` again, 0.1 s apart, until ``shows(answer)`` (or ``attempts``
    run out: the last answer, or its error); ``errors`` are what a read may
    raise while the change is on its way (an unknown topic)."""
    for attempt in range(attempts):
        try:
            answer = read()
        except errors:
            if attempt == attempts - 1:
                raise
        else:
            if shows(answer) or attempt == attempts - 1:
                return answer
        time.sleep(0.1)
    raise AssertionError("unreachable")


def configs(admin, ck, ck_admin, topic, name, value):
    """The topic's :data:`SHOWN` configs once its ``name`` is ``value``."""
    resource = ck_admin.ConfigResource(ck_admin.ResourceType.TOPIC, topic)

    def read():
        (entries,) = results(admin.describe_configs([resource])).values()
        return {
            name: [entry.value, ck_admin.ConfigSource(entry.source).name, entry.is_default]
            for name, entry in sorted(entries.items())
            if name in SHOWN
        }

    return settled(read, lambda shown: shown[name][0] == value, ck.KafkaException)


def topics_and_configs(admin, ck, ck_admin, compacted, plain):
    created = admin.create_topics(
        [
            ck_admin.NewTopic(
                compacted,
                num_partitions=3,
                replication_factor=1,
                config={"cleanup.policy": "compact"},
            ),
            ck_admin.NewTopic(plain, num_partitions=2, replication_factor=1),
        ],
        operation_timeout=30,
    )
    clientlib.emit("created", topics=list(results(created)))

    metadata = settled(
        lambda: admin.list_topics(timeout=10),
        lambda md: all(
            name in md.topics and len(md.topics[name].partitions) == count
            and all(p.leader in md.brokers for p in md.topics[name].partitions.values())
            for name, count in ((compacted, 3), (plain, 2))
        ),
        ck.KafkaException,
    )  # fmt: skip
    clientlib.emit(
        "metadata",
        brokers=len(metadata.brokers),
        topics={
            name: sorted(
                [p.id, len(p.replicas), p.leader in metadata.brokers]
                for p in metadata.topics[name].partitions.values()
            )
            for name in (compacted, plain)
        },
    )
    described = settled(
        lambda: results(admin.describe_topics(ck.TopicCollection([compacted, plain]))),
        lambda topics: True,
        ck.KafkaException,
    )
    clientlib.emit(
        "described_topics",
        topics={
            name: [
                t.name,
                t.is_internal,
                t.topic_id is not None,
                [[p.id, len(p.replicas), len(p.isr), p.leader is not None] for p in t.partitions],
            ]
            for name, t in described.items()
        },
    )
    shown = configs(admin, ck, ck_admin, compacted, "cleanup.policy", "compact")
    clientlib.emit("configs", topic=compacted, configs=shown)

    # Only the named entries change; the others keep their values.
    incremental = ck_admin.ConfigResource(
        ck_admin.ResourceType.TOPIC,
        compacted,
        incremental_configs=[
            ck_admin.ConfigEntry(
                "retention.ms", "3600000", incremental_operation=ck_admin.AlterConfigOpType.SET
            ),
        ],
    )
    clientlib.emit(
        "incremental_altered",
        results=list(results(admin.incremental_alter_configs([incremental])).values()),
    )
    shown = configs(admin, ck, ck_admin, compacted, "retention.ms", "3600000")
    clientlib.emit("configs", topic=compacted, configs=shown)

    # alter_configs replaces the resource's whole dynamic config with what is set.
    whole = ck_admin.ConfigResource("topic", plain)
    whole.set_config("max.message.bytes", "65536")
    clientlib.emit("altered", results=list(results(admin.alter_configs([whole])).values()))
    shown = configs(admin, ck, ck_admin, plain, "max.message.bytes", "65536")
    clientlib.emit("configs", topic=plain, configs=shown)

    grown = admin.create_partitions([ck_admin.NewPartitions(plain, 4)], validate_only=False)
    clientlib.emit("partitions_created", results=list(results(grown).values()))
    metadata = settled(
        lambda: admin.list_topics(plain, timeout=10),
        lambda md: len(md.topics[plain].partitions) == 4,
        ck.KafkaException,
    )
    clientlib.emit("partitions", topic=plain, count=len(metadata.topics[plain].partitions))


def groups(admin, ck, group, topic):
    offsets = [ck.TopicPartition(topic, 0, 5), ck.TopicPartition(topic, 2, 7)]
    altered = results(
        admin.alter_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(group, offsets)])
    )
    clientlib.emit(
        "group_offsets_altered",
        groups={
            g: sorted([tp.partition, tp.offset] for tp in r.topic_partitions)
            for g, r in altered.items()
        },
    )
    listed = admin.list_consumer_groups(
        request_timeout=10, states={ck.ConsumerGroupState.EMPTY}
    ).result()
    clientlib.emit(
        "listed_groups",
        groups=[
            [g.group_id, g.is_simple_consumer_group, g.state.name]
            for g in listed.valid
            if g.group_id == group
        ],
        errors=len(listed.errors),
    )
    (described,) = results(admin.describe_consumer_groups([group], request_timeout=10)).values()
    clientlib.emit(
        "described_group",
        group=described.group_id,
        state=described.state.name,
        simple=described.is_simple_consumer_group,
        members=len(described.members),
        coordinator=described.coordinator is not None,
    )
    (fetched,) = results(
        admin.list_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(group)])
    ).values()
    clientlib.emit(
        "group_offsets",
        group=fetched.group_id,
        offsets=sorted(
            [tp.topic == topic, tp.partition, tp.offset] for tp in fetched.topic_partitions
        ),
    )
    clientlib.emit(
        "list_groups",
        groups=[
            [g.id, g.state, g.protocol_type, len(g.members)]
            for g in admin.list_groups(timeout=10)
            if g.id == group
        ],
    )
    deleted = results(admin.delete_consumer_groups([group], request_timeout=10))
    clientlib.emit("groups_deleted", groups=list(deleted))


def main() -> None:
    cli = clientlib.parser("Topics, configs, groups and the cluster through AdminClient")
    cli.add_argument("-t", dest="prefix", required=True, help="the topics' name prefix")
    cli.add_argument("-g", dest="group", required=True)
    args = cli.parse_args()
    ck = clientlib.module(args.lib)
    ck_admin = clientlib.module(args.lib, "admin")

    compacted, plain = f"{args.prefix}-compacted", f"{args.prefix}-plain"
    with ck_admin.AdminClient({"bootstrap.servers": args.bootstrap_servers}) as admin:
        topics_and_configs(admin, ck, ck_admin, compacted, plain)
        groups(admin, ck, args.group, compacted)

        cluster = admin.describe_cluster(request_timeout=10).result()
        clientlib.emit(
            "cluster",
            cluster_id=cluster.cluster_id,
            controller=cluster.controller is not None,
            nodes=sorted(node.id for node in cluster.nodes),
        )

        deleted = admin.delete_topics([compacted, plain], operation_timeout=30)
        clientlib.emit("deleted", topics=list(results(deleted)))
        admin.poll(timeout=0)


if __name__ == "__main__":
    main()
