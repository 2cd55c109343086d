"""ElectLeaders against brokerlite with confluent-kafka's and kafka-python's admins:
on one node every partition already has its preferred leader, as Kafka's
controller says (ELECTION_NOT_NEEDED; unknown partitions UNKNOWN_TOPIC_OR_PARTITION;
the whole cluster: nothing to report)."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import ElectionType
from confluent_kafka import TopicPartition as CkPartition
from confluent_kafka.admin import AdminClient, NewTopic

from trafka.brokerlite import broker_in_thread
from trafka.codec import ErrorCode

pytestmark = pytest.mark.timeout(60)


def test_no_election_is_ever_needed_on_one_node(tmp_path: Path) -> None:
    from kafka import KafkaAdminClient
    from kafka.errors import UnknownTopicOrPartitionError

    with broker_in_thread(port=0, data_dir=tmp_path / "data") as running:
        bs = running.bootstrap_servers
        ck = AdminClient({"bootstrap.servers": bs})
        ck.create_topics([NewTopic("elect", 2, 1)])["elect"].result(30)

        named = ck.elect_leaders(
            ElectionType.PREFERRED,
            [CkPartition("elect", 0), CkPartition("elect", 1), CkPartition("elect", 7)],
        ).result(30)
        codes = {(tp.topic, tp.partition): e.name() if e else None for tp, e in named.items()}
        assert codes == {
            ("elect", 0): "ELECTION_NOT_NEEDED",
            ("elect", 1): "ELECTION_NOT_NEEDED",
            ("elect", 7): "UNKNOWN_TOPIC_OR_PART",
        }
        assert ck.elect_leaders(ElectionType.UNCLEAN, None).result(30) == {}
        del ck  # before the broker stops

        kp = KafkaAdminClient(bootstrap_servers=bs)
        try:
            response = kp.elect_leaders(0, {"elect": [0, 1]})
            with pytest.raises(UnknownTopicOrPartitionError):
                kp.elect_leaders(0, {"elect": [5]})
        finally:
            kp.close()
        [topic] = response.replica_election_results
        assert [(p.partition_id, p.error_code) for p in topic.partition_result] == [
            (0, ErrorCode.ELECTION_NOT_NEEDED),
            (1, ErrorCode.ELECTION_NOT_NEEDED),
        ]
