"""The data source over TLS and SASL: ``kafka.*`` security settings reach the
driver's planning and the executors' consumers and producers, a delegation
token's too (the way Spark's own connector authenticates executors)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import trustme
from spark_helpers import consume_all, create, fresh, produce

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.server import broker_in_thread

pytestmark = pytest.mark.timeout(240)

USERS = {"spark-user": "s3cret"}


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningBroker, str]]:
    ca = trustme.CA()
    folder = tmp_path_factory.mktemp("spark-certs")
    cert = ca.issue_cert("127.0.0.1")
    paths = {name: str(folder / f"{name}.pem") for name in ("ca", "cert", "key")}
    ca.cert_pem.write_to_path(paths["ca"])
    cert.cert_chain_pems[0].write_to_path(paths["cert"])
    cert.private_key_pem.write_to_path(paths["key"])
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=tmp_path_factory.mktemp("spark-secure"),
        security_protocol="SASL_SSL",
        sasl_users=USERS,
        ssl_certfile=paths["cert"],
        ssl_keyfile=paths["key"],
        delegation_token_secret_key="spark-token-secret",
    ) as running:
        yield running, paths["ca"]


def _options(ca: str, password: str = "s3cret") -> dict[str, str]:
    return {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.username": "spark-user",
        "kafka.sasl.password": password,
        "kafka.ssl.ca.location": ca,
    }


def _sdk(ca: str) -> dict[str, Any]:
    return {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "spark-user",
        "sasl_password": "s3cret",
        "ssl_cafile": ca,
    }


@pytest.mark.slow
def test_read_and_write_over_sasl_ssl(spark: Any, secure: tuple[RunningBroker, str]) -> None:
    broker, ca = secure
    topic, copy = fresh("secure"), fresh("secure")
    create(broker, topic, 2, **_sdk(ca))
    create(broker, copy, 1, **_sdk(ca))
    produce(broker, topic, [(None, b"%d" % i, None) for i in range(50)], **_sdk(ca))

    df = (
        spark.read.format("trafka")
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
        .options(**_options(ca))
        .option("subscribe", topic)
        .load()
    )
    assert sorted(int(r.value) for r in df.collect()) == list(range(50))
    (
        df.select("value")
        .write.format("trafka")
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
        .options(**_options(ca))
        .option("topic", copy)
        .mode("append")
        .save()
    )
    assert sorted(int(r.value) for r in consume_all(broker, copy, 1, **_sdk(ca))) == list(range(50))


def test_a_wrong_password_fails_the_planning_clearly(
    spark: Any, secure: tuple[RunningBroker, str]
) -> None:
    broker, ca = secure
    with pytest.raises(Exception, match="refused the SASL authentication"):
        (
            spark.read.format("trafka")
            .option("kafka.bootstrap.servers", broker.bootstrap_servers)
            .options(**_options(ca, password="wrong"))
            .option("subscribe", "anything")
            .load()
            .collect()
        )


def test_a_delegation_token_reads_and_writes_without_the_password(
    spark: Any, secure: tuple[RunningBroker, str]
) -> None:
    from trafka.sdk.blocking import Admin

    broker, ca = secure
    topic, copy = fresh("token"), fresh("token")
    create(broker, topic, 2, **_sdk(ca))
    create(broker, copy, 1, **_sdk(ca))
    produce(broker, topic, [(None, b"%d" % i, None) for i in range(20)], **_sdk(ca))
    with Admin(bootstrap_servers=broker.bootstrap_servers, **_sdk(ca)) as admin:
        token = admin.create_delegation_token(max_lifetime_ms=600_000)
    token_id, hmac = token.token_info.token_id, token.hmac_base64
    # trafka's spelling of the token login, then Java's (what Spark's connector writes).
    trafka_form = {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.username": token_id,
        "kafka.sasl.password": hmac,
        "kafka.sasl.scram.tokenauth": "true",
        "kafka.ssl.ca.location": ca,
    }
    jaas_form = {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        f'required username="{token_id}" password="{hmac}" tokenauth="true";',
        "kafka.ssl.ca.location": ca,
    }
    df = (
        spark.read.format("trafka")
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
        .options(**trafka_form)
        .option("subscribe", topic)
        .load()
    )
    assert sorted(int(r.value) for r in df.collect()) == list(range(20))
    (
        df.select("value")
        .write.format("trafka")
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
        .options(**jaas_form)
        .option("topic", copy)
        .mode("append")
        .save()
    )
    assert sorted(int(r.value) for r in consume_all(broker, copy, 1, **_sdk(ca))) == list(range(20))
    with Admin(bootstrap_servers=broker.bootstrap_servers, **_sdk(ca)) as admin:
        admin.expire_delegation_token(token.hmac)
    # A new login with the expired token is refused. Connections opened before
    # the expiry stay authenticated, as a Kafka broker's do unless it sets
    # connections.max.reauth.ms (KIP-368), and the source keeps its clients
    # between queries, pooled by their settings: another client id makes this
    # query log in afresh.
    with pytest.raises(Exception, match="refused the SASL authentication"):
        (
            spark.read.format("trafka")
            .option("kafka.bootstrap.servers", broker.bootstrap_servers)
            .options(**trafka_form)
            .option("kafka.client.id", fresh("expired"))
            .option("subscribe", topic)
            .load()
            .collect()
        )
