"""KafkaError's text: the code's name once, then what the peer or Kafka says of it."""

from trafka.codec.errors import ErrorCode, KafkaError


def test_the_name_is_said_once() -> None:
    assert str(KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "UNKNOWN_TOPIC_OR_PARTITION")) == (
        "[UNKNOWN_TOPIC_OR_PARTITION (3)]"
    )
    described = str(KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
    assert described.startswith("[UNKNOWN_TOPIC_OR_PARTITION (3)] ")
    assert described.count("UNKNOWN_TOPIC_OR_PARTITION") == 1
    assert (
        str(KafkaError(3, "no such topic: t"))
        == "[UNKNOWN_TOPIC_OR_PARTITION (3)] no such topic: t"
    )
