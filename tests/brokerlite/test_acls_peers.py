"""ACLs seen by clients that name their principal in other ways: Debian's kcat
over SASL, and librdkafka with a TLS client certificate, whose principal is the
certificate's subject as RFC 2253 writes it (checked against `cryptography`'s
RFC 4514 form, the same for these attributes)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from cryptography import x509

from trafka.brokerlite import RunningBroker, broker_in_thread

pytestmark = pytest.mark.timeout(120)

KCAT = shutil.which("kcat")
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def grant(config: dict[str, Any], principal: str, topic: str, *ops: str) -> None:
    """Create ALLOW ACLs with confluent-kafka's AdminClient (``config``: a super user's)."""
    admin = AdminClient(config)
    bindings = [
        AclBinding(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            principal,
            "*",
            AclOperation[op],
            AclPermissionType.ALLOW,
        )
        for op in ops
    ]
    for future in admin.create_acls(bindings, request_timeout=30).values():
        future.result()


@contextlib.contextmanager
def serve(tmp_path: Path, **settings: Any) -> Iterator[RunningBroker]:
    with broker_in_thread(
        port=0,
        data_dir=tmp_path / "data",
        group_initial_rebalance_delay_ms=0,
        authorizer_class_name=AUTHORIZER,
        **settings,
    ) as running:
        yield running


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed")
def test_kcat_refused_then_allowed(tmp_path: Path) -> None:
    assert KCAT is not None
    with serve(
        tmp_path,
        security_protocol="SASL_PLAINTEXT",
        sasl_users={"alice": "alice-pw", "admin": "admin-pw"},
        super_users=("User:admin",),
    ) as running:
        admin = kcat_options(running, "admin", "admin-pw")
        created = run_kcat(admin, "-P", "-t", "orders", stdin=b"first")  # auto-created
        assert created.returncode == 0, created.stderr
        alice = kcat_options(running, "alice", "alice-pw")
        refused = run_kcat(alice, "-C", "-t", "orders", "-o", "beginning", "-e", "-q")
        assert refused.returncode != 0
        assert b"authoriz" in refused.stderr.lower(), refused.stderr
        grant(librdkafka(running, "admin", "admin-pw"), "User:alice", "orders", "READ")
        allowed = run_kcat(alice, "-C", "-t", "orders", "-o", "beginning", "-e", "-q")
        assert allowed.returncode == 0, allowed.stderr
        assert allowed.stdout.splitlines() == [b"first"]


def librdkafka(running: RunningBroker, user: str, password: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": running.bootstrap_servers,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": user,
        "sasl.password": password,
    }


def kcat_options(running: RunningBroker, user: str, password: str) -> list[str]:
    config = librdkafka(running, user, password)
    return [item for key, value in config.items() for item in ("-X", f"{key}={value}")]


def run_kcat(options: list[str], *args: str, stdin: bytes | None = None) -> Any:
    assert KCAT is not None
    return subprocess.run(
        [KCAT, *options, *args], input=stdin, capture_output=True, timeout=60, check=False
    )


def pki(folder: Path, leaves: dict[str, tuple[str, str | None]]) -> dict[str, Path]:
    """A CA's certificate (``ca``) and, per name, a leaf it signed for
    (identity, common name): ``<name>_cert`` (its chain) and ``<name>_key``."""
    ca = trustme.CA()
    files: dict[str, Path] = {"ca": folder / "ca.pem"}
    ca.cert_pem.write_to_path(str(files["ca"]))
    for name, (identity, common_name) in leaves.items():
        leaf = ca.issue_cert(identity, common_name=common_name)
        files[f"{name}_cert"] = folder / f"{name}-cert.pem"
        files[f"{name}_key"] = folder / f"{name}-key.pem"
        for i, pem in enumerate(leaf.cert_chain_pems):
            pem.write_to_path(str(files[f"{name}_cert"]), append=i > 0)
        leaf.private_key_pem.write_to_path(str(files[f"{name}_key"]))
    return files


def serve_tls(tmp_path: Path, files: dict[str, Path], **settings: Any) -> Any:
    """:func:`serve` on an SSL listener with the ``broker`` leaf of :func:`pki`,
    client certificates required."""
    return serve(
        tmp_path,
        security_protocol="SSL",
        ssl_certfile=files["broker_cert"],
        ssl_keyfile=files["broker_key"],
        ssl_cafile=files["ca"],
        ssl_client_auth="required",
        **settings,
    )


def tls_client(running: RunningBroker, files: dict[str, Path], name: str) -> dict[str, Any]:
    """confluent-kafka's settings for the client ``name`` of :func:`pki`."""
    return {
        "bootstrap.servers": running.bootstrap_servers,
        "security.protocol": "SSL",
        "ssl.ca.location": str(files["ca"]),
        "ssl.certificate.location": str(files[f"{name}_cert"]),
        "ssl.key.location": str(files[f"{name}_key"]),
    }


def test_client_certificate_subject_is_the_principal(tmp_path: Path) -> None:
    names = ("broker", "127.0.0.1"), ("client", "client"), ("admin", "admin")
    files = pki(tmp_path, {name: (identity, None) for name, identity in names})

    def principal(name: str) -> str:
        cert = x509.load_pem_x509_certificate(files[f"{name}_cert"].read_bytes())
        return f"User:{cert.subject.rfc4514_string()}"

    with serve_tls(tmp_path, files, super_users=(principal("admin"),)) as running:

        def config(name: str) -> dict[str, Any]:
            return tls_client(running, files, name)

        assert produce(config("admin"), "certs") is None  # a super user; creates the topic
        assert produce(config("client"), "certs") == KafkaError.TOPIC_AUTHORIZATION_FAILED
        grant(config("admin"), principal("client"), "certs", "WRITE")
        assert produce(config("client"), "certs") is None


def produce(config: dict[str, Any], topic: str) -> int | None:
    """Produce one record; None when delivered, else the error code."""
    outcome: list[Any] = []
    producer = Producer({**config, "message.timeout.ms": 10_000})
    producer.produce(topic, b"x", on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(30)
    assert outcome, "no delivery report"
    return None if outcome[0] is None else outcome[0].code()


def test_principal_mapping_rules_name_certificate_principals(tmp_path: Path) -> None:
    """``ssl.principal.mapping.rules`` (KIP-371): the first rule whose pattern
    matches the whole subject names the principal, here its CN lower-cased; a
    subject no rule matches fails the client's connection (the docs of Kafka's
    ``ssl.principal.mapping.rules``: "if no rule matches, an exception is
    thrown" and the client's authentication fails)."""
    leaves = {"broker": ("127.0.0.1", None), "admin": ("a", "Admin"), "client": ("c", "Client")}
    leaves["nameless"] = ("n", None)  # a subject without a CN: no rule matches
    files = pki(tmp_path, leaves)

    with serve_tls(
        tmp_path,
        files,
        ssl_principal_mapping_rules="RULE:^CN=([^,]*),.*$/$1/L",
        super_users=("User:admin",),
    ) as running:

        def config(name: str) -> dict[str, Any]:
            return tls_client(running, files, name)

        assert produce(config("admin"), "mapped") is None  # User:admin, a super user
        assert produce(config("client"), "mapped") == KafkaError.TOPIC_AUTHORIZATION_FAILED
        grant(config("admin"), "User:client", "mapped", "WRITE")
        assert produce(config("client"), "mapped") is None
        outcome: list[Any] = []
        nameless = Producer({**config("nameless"), "message.timeout.ms": 3000})
        nameless.produce("mapped", b"x", on_delivery=lambda err, _msg: outcome.append(err))
        nameless.flush(30)
        assert [err.code() for err in outcome] == [KafkaError._MSG_TIMED_OUT]


def test_a_mapping_rule_that_does_not_parse_is_a_configuration_error(tmp_path: Path) -> None:
    from trafka.brokerlite.config import BrokerConfig, ConfigError

    with pytest.raises(
        ConfigError, match=r"ssl_principal_mapping_rules: .*'RULE:\^CN=\(\.\*\$/\$1/': missing \)"
    ):
        BrokerConfig(data_dir=tmp_path, ssl_principal_mapping_rules="RULE:^CN=(.*$/$1/")
    with pytest.raises(ConfigError, match=r"ssl_principal_mapping_rules: invalid .* 'CN'"):
        BrokerConfig(data_dir=tmp_path, ssl_principal_mapping_rules="DEFAULT, CN")
