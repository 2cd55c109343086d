"""The proxy's record encryption with AWS KMS's API (issue #83, item 1): boto3
against moto's KMS in server mode, started by the tests (Kroxylicious tests its
AWS KMS against LocalStack the same way). A KEK is an alias; GenerateDataKey
makes each DEK, Decrypt unwraps it. Rotation moves the alias to a new key
(UpdateAlias): new records are wrapped by it, old ones still read, none is
encrypted again. A proxy that never saw a DEK unwraps it off its event loop
and consumers read on. The rotation test runs on brokerlite and on Apache
Kafka 4.x (the shared per-worker node): Kafka's log folder holds no plaintext
either.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from encryption_helpers import (
    Target,
    fetch_once,
    frames,
    no_plaintext,
    once_in_order,
    read_in_order,
    target_for,
)
from moto.server import ThreadedMotoServer
from proxy_helpers import create, free_port, fresh, placement, sdk_reports, wait_until

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.server import broker_in_thread
from trafka.codec.errors import ErrorCode
from trafka.proxy import proxy_in_thread
from trafka.proxy.encryption import RecordEncryption

pytestmark = pytest.mark.timeout(120)

CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


@pytest.fixture(scope="module")
def kms_url() -> Iterator[str]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture(scope="module")
def kms(kms_url: str) -> Any:
    return boto3.client("kms", region_name="eu-west-1", endpoint_url=kms_url, **CREDENTIALS)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("encryption-aws")


@pytest.fixture(scope="module")
def broker(folder: Path) -> Iterator[RunningBroker]:
    with broker_in_thread(port=0, host="127.0.0.1", data_dir=folder / "data") as running:
        yield running


@pytest.fixture(scope="module", params=["brokerlite", "4"])
def broker_or_kafka(request: pytest.FixtureRequest, broker: RunningBroker, folder: Path) -> Target:
    return target_for(request, broker.bootstrap_servers, folder / "data")


def _settings(kms_url: str, **more: Any) -> dict[str, Any]:
    return {
        "kms": "aws",
        "aws_region": "eu-west-1",
        "aws_endpoint_url": kms_url,
        **CREDENTIALS,
        "topics": {"aws-.*": "alias/{topic}"},
        **more,
    }


def test_records_wrapped_by_aws_kms_read_back_across_an_alias_rotation(
    broker_or_kafka: Target, kms: Any, kms_url: str
) -> None:
    target = broker_or_kafka
    topic = fresh("aws")
    create(target.bootstrap_servers, topic, 2, served=target.kafka)
    secret = b"SECRET-" + topic.encode()  # this test's own, on a broker other tests share
    first = kms.create_key()["KeyMetadata"]["Arn"]
    kms.create_alias(AliasName=f"alias/{topic}", TargetKeyId=first)
    encryption = RecordEncryption(_settings(kms_url, dek_max_records=50))
    with proxy_in_thread(upstream=(target.bootstrap_servers,), port=0, filters=(encryption,)) as px:
        sends = [(b"%s-old-%d" % (secret, i), b"k%d" % (i % 7)) for i in range(120)]
        before = sdk_reports(px.bootstrap_servers, topic, sends, enable_idempotence=True)
        second = kms.create_key()["KeyMetadata"]["Arn"]
        kms.update_alias(AliasName=f"alias/{topic}", TargetKeyId=second)
        sends = [(b"%s-new-%d" % (secret, i), b"k%d" % (i % 7)) for i in range(120)]
        after = sdk_reports(px.bootstrap_servers, topic, sends, enable_idempotence=True)
        once_in_order(read_in_order(px.bootstrap_servers, topic, 2), [r[0] for r in before + after])
    made = encryption.stats
    # DEKs are reused: a handful of GenerateDataKey calls for 240 records.
    assert 0 < encryption.samples_by_name()["deks_made"] <= 10, made
    seen = frames(placement(target.bootstrap_servers, topic, 2))
    assert {kek for kek, _ in seen} == {f"alias/{topic}"}
    assert {version for _, version in seen} == {first, second}
    no_plaintext(target, topic, secret)

    # A proxy that never saw these DEKs unwraps them (on a worker thread, the
    # partitions answering without records meanwhile): its consumers read all.
    fresh_proxy = RecordEncryption(_settings(kms_url))
    with proxy_in_thread(
        upstream=(target.bootstrap_servers,), port=0, filters=(fresh_proxy,)
    ) as px:
        once_in_order(read_in_order(px.bootstrap_servers, topic, 2), [r[0] for r in before + after])
    assert fresh_proxy.samples_by_name()["deks_unwrapped"] >= 2


def test_a_key_aws_refuses_refuses_the_batch_and_a_disabled_one_the_fetch(
    broker: RunningBroker, kms: Any, kms_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A KEK AWS does not know: the partition's answer is INVALID_RECORD (the
    proxy logs AWS's refusal) and nothing is written. A frame whose DEK AWS
    will not unwrap (it names another key): a proxy answers CORRUPT_MESSAGE
    once AWS refused, never the ciphertext."""
    import confluent_kafka

    topic = fresh("aws")
    create(broker.bootstrap_servers, topic, 1)
    encryption = RecordEncryption(_settings(kms_url))
    with proxy_in_thread(upstream=(broker.bootstrap_servers,), port=0, filters=(encryption,)) as px:
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": px.bootstrap_servers, "retries": 0}
        )
        errors: list[Any] = []
        producer.produce(topic, value=b"v", on_delivery=lambda err, _m: errors.append(err))
        assert producer.flush(30) == 0
        assert errors[0].code() == confluent_kafka.KafkaError.INVALID_RECORD, errors
        assert placement(broker.bootstrap_servers, topic, 1) == []
        assert "NotFoundException" in caplog.text

        key = kms.create_key()["KeyMetadata"]["Arn"]
        kms.create_alias(AliasName=f"alias/{topic}", TargetKeyId=key)
        sdk_reports(px.bootstrap_servers, topic, [(b"SECRET-moved", b"k")])
    # Its frame naming another key as the one that wrapped its DEK (moto's
    # Decrypt ignores a disabled key's state, so another key it is).
    (written,) = placement(broker.bootstrap_servers, topic, 1)
    wrong = kms.create_key()["KeyMetadata"]["Arn"]
    assert len(wrong) == len(key) and key.encode() in written.value
    sdk_reports(
        broker.bootstrap_servers,
        topic,
        [(written.value.replace(key.encode(), wrong.encode()), b"k")],
    )
    other = RecordEncryption(_settings(kms_url))
    with proxy_in_thread(upstream=(broker.bootstrap_servers,), port=0, filters=(other,)) as px:
        # The good record reads once its DEK is unwrapped (no records, no error, till then).
        wait_until(lambda: fetch_once(px.bootstrap_servers, topic, 0) == (0, [b"SECRET-moved"]))
        seen: list[Any] = []

        def answered() -> bool:
            seen.append(fetch_once(px.bootstrap_servers, topic, 1))
            return seen[-1][0] != 0

        wait_until(answered)
    assert seen[-1] == (ErrorCode.CORRUPT_MESSAGE, [])
    assert all(answer == (0, []) for answer in seen[:-1])  # while AWS was asked
