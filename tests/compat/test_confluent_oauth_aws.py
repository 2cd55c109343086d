"""confluent-kafka 2.16's AWS IAM tokens for OAUTHBEARER
(``sasl.oauthbearer.metadata.authentication.type=aws_iam``), run against
``confluent_kafka`` itself and ``trafka.compat.confluent`` and compared:

* the checks as a client is made: ``sasl.oauthbearer.method`` exactly ``oidc``,
  ``sasl.oauthbearer.config`` given, its keys and values, the extensions'
  grammar (read first), each a ``ValueError`` with the same words, from the
  producer, the consumer and the admin client alike; a value librdkafka does not
  have is ``_INVALID_ARG``;
* without boto3, an ``ImportError`` naming the extra to install (and not
  boto3), chained to nothing; an explicit ``oauth_cb`` wins over the setting;
* both log in to brokerlite with the JWT a local STS gives them (boto3 signs
  a real ``GetWebIdentityToken`` request to it); brokerlite checks the token's
  signature against the STS's key set and its audience.
"""

from __future__ import annotations

import importlib
import json
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("boto3")
pytest.importorskip("cryptography")

from fake_sts import AUDIENCE, FakeSts, aws_environment
from oauth_keys import jwks

pytestmark = pytest.mark.timeout(120)

APIS = ["confluent_kafka", "trafka.compat.confluent"]
MARK = "sasl.oauthbearer.metadata.authentication.type"
METHOD, CONFIG, EXTENSIONS = (
    "sasl.oauthbearer.method",
    "sasl.oauthbearer.config",
    "sasl.oauthbearer.extensions",
)
GOOD = "region=us-east-1,audience=https://a"


@pytest.fixture(autouse=True)
def _aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    aws_environment(monkeypatch, tmp_path)


def dead_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def outcome(make: Any) -> tuple[str, str]:
    """(exception type, its text, or a KafkaError's code), or ("ok", "")."""
    try:
        client = make()
    except Exception as exc:
        first = exc.args[0] if exc.args else None
        return (type(exc).__name__, str(first.code() if hasattr(first, "code") else exc))
    close = getattr(client, "close", None)
    if callable(close):
        close()
    return ("ok", "")


REFUSED: list[dict[str, Any]] = [
    {MARK: "aws_iam"},
    {MARK: "aws_iam", CONFIG: GOOD},
    {MARK: "aws_iam", METHOD: "default", CONFIG: GOOD},
    {MARK: "aws_iam", METHOD: "OIDC", CONFIG: GOOD},
    {MARK: "aws_iam", METHOD: " oidc", CONFIG: GOOD},
    {MARK: "aws_iam", METHOD: 1, CONFIG: GOOD},
    {MARK: "aws_iam", METHOD: "oidc"},
    {MARK: "aws_iam", METHOD: "oidc", CONFIG: ""},
    {MARK: "aws_iam", METHOD: "oidc", CONFIG: None},
    {MARK: "aws_iam", METHOD: "oidc", CONFIG: "  ,  "},
    {MARK: "aws_iam", METHOD: "oidc", CONFIG: "region=us-east-1"},
    {MARK: "aws_iam", METHOD: "oidc", CONFIG: "audience=a"},
    {MARK: "aws_iam", METHOD: "oidc", CONFIG: GOOD + ",not_a_key=foo"},
    {MARK: "aws_iam", METHOD: "oidc", CONFIG: GOOD + ",extension_x=1"},
    {MARK: "aws_iam", METHOD: "oidc", CONFIG: GOOD + ",signing_algorithm=HS256"},
    {MARK: "aws_iam", METHOD: "oidc", CONFIG: GOOD + ",signing_algorithm="},
    {MARK: "aws_iam", METHOD: "oidc", CONFIG: GOOD + ",duration_seconds=59"},
    {MARK: "aws_iam", METHOD: "oidc", CONFIG: GOOD + ",duration_seconds=3601"},
    {MARK: "aws_iam", METHOD: "oidc", CONFIG: GOOD + ",duration_seconds=abc"},
    {MARK: "aws_iam", METHOD: "oidc", CONFIG: GOOD + ",aws_debug=verbose"},
    {MARK: "aws_iam", METHOD: "oidc", CONFIG: "region=,audience=a"},
    {MARK: "aws_iam", METHOD: "oidc", CONFIG: GOOD + ",tag_=v"},
    {MARK: "aws_iam", METHOD: "oidc", CONFIG: GOOD + ",sts_endpoint="},
    {MARK: "aws_iam", METHOD: "oidc", CONFIG: GOOD + ",sts_endpoint=not a url"},
    {MARK: "aws_iam", METHOD: "oidc", CONFIG: "noequals"},
    {MARK: "aws_iam", METHOD: "oidc", CONFIG: "=v," + GOOD},
    {MARK: "aws_iam", METHOD: "oidc", CONFIG: GOOD + "".join(f",tag_{i}=v" for i in range(51))},
    {MARK: "aws_iam", METHOD: "oidc", CONFIG: GOOD, EXTENSIONS: "malformed-no-equals"},
    {MARK: "aws_iam", METHOD: "oidc", CONFIG: GOOD, EXTENSIONS: "a=b, c"},
    {MARK: "aws_iam", METHOD: "oidc", CONFIG: GOOD, EXTENSIONS: "=x"},
    {MARK: "aws_iam", METHOD: "oidc", CONFIG: GOOD + ",zz=1", EXTENSIONS: "bad"},
    {MARK: "bogus", METHOD: "oidc", CONFIG: GOOD},
]


def refusals(api: str) -> list[tuple[str, str]]:
    ck = importlib.import_module(api)
    admin = importlib.import_module(api + ".admin")
    bs = dead_address()
    seen = [outcome(lambda c=conf: ck.Producer({"bootstrap.servers": bs, **c})) for conf in REFUSED]
    for conf in REFUSED[:2] + REFUSED[12:13] + REFUSED[-4:-3]:
        full = {"bootstrap.servers": bs, "group.id": "g", **conf}
        seen.append(outcome(lambda c=full: ck.Consumer(c)))
        seen.append(outcome(lambda c=full: admin.AdminClient(c)))
    return seen


@pytest.mark.parametrize("api", APIS)
def test_the_settings_are_refused_as_confluent_kafka_refuses_them(api: str) -> None:
    assert refusals(api) == refusals("confluent_kafka")


def _import_error(api: str, kind: str) -> ImportError:
    ck = importlib.import_module(api)
    admin = importlib.import_module(api + ".admin")
    conf = {"bootstrap.servers": dead_address(), MARK: "aws_iam", METHOD: "oidc", CONFIG: GOOD}
    make = {
        "Producer": lambda: ck.Producer(conf),
        "Consumer": lambda: ck.Consumer({**conf, "group.id": "g"}),
        "AdminClient": lambda: admin.AdminClient(conf),
    }[kind]
    with pytest.raises(ImportError) as info:
        make()
    return info.value


@pytest.mark.parametrize("kind", ["Producer", "Consumer", "AdminClient"])
def test_without_boto3_the_error_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)
    # confluent-kafka imports boto3 with its AWS modules: they import it again
    for name in list(sys.modules):
        if name.startswith("confluent_kafka._oauthbearer.aws"):
            monkeypatch.delitem(sys.modules, name)
    theirs, ours = (_import_error(api, kind) for api in APIS)
    for error in (theirs, ours):
        text = str(error)
        assert "pip install" in text and "oauthbearer-aws" in text and "aws_iam" in text
        assert "boto3" not in text
        assert error.__cause__ is None and error.__context__ is None
    # the same words; the package to install is trafka's
    assert str(ours).replace("'trafka[", "'confluent-kafka[") == str(theirs)
    # the checks before it come first in both
    for api in APIS:
        ck = importlib.import_module(api)
        with pytest.raises(ValueError, match="method=oidc"):
            ck.Producer({"bootstrap.servers": dead_address(), MARK: "aws_iam", CONFIG: GOOD})


def test_an_explicit_oauth_cb_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    """The setting is not looked at: no boto3 needed, and the method is not checked."""
    from trafka.compat.confluent import Producer

    monkeypatch.setitem(sys.modules, "boto3", None)
    asked: list[str] = []

    def oauth_cb(config: str) -> tuple[str, float, str, dict[str, str]]:
        asked.append(config)
        return "token", time.time() + 600, "me", {}

    producer = Producer(
        {
            "bootstrap.servers": dead_address(),
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "OAUTHBEARER",
            MARK: "aws_iam",
            CONFIG: "anything",
            "oauth_cb": oauth_cb,
        }
    )
    assert asked == ["anything"]
    producer.flush(0)


@pytest.fixture
def sts() -> Iterator[FakeSts]:
    fake = FakeSts()
    yield fake
    fake.close()


@pytest.mark.parametrize("api", APIS)
def test_producing_with_a_token_from_sts(api: str, sts: FakeSts, tmp_path: Path) -> None:
    from trafka.brokerlite import broker_in_thread

    ck = importlib.import_module(api)
    key_set = tmp_path / "jwks.json"
    key_set.write_text(json.dumps(jwks(*sts.keys.values())))
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=tmp_path / "data",
        security_protocol="SASL_PLAINTEXT",
        sasl_enabled_mechanisms="OAUTHBEARER",
        sasl_oauthbearer_jwks_endpoint_url=key_set.as_uri(),
        sasl_oauthbearer_expected_audience=AUDIENCE,
    ) as running:
        producer = ck.Producer(
            {
                "bootstrap.servers": running.bootstrap_servers,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "OAUTHBEARER",
                METHOD: "oidc",
                MARK: "aws_iam",
                CONFIG: f"region=eu-west-1,audience={AUDIENCE},sts_endpoint={sts.url},"
                "signing_algorithm=RS256,duration_seconds=900",
                EXTENSIONS: "logicalCluster=lkc-1",
            }
        )
        delivered: list[Any] = []
        producer.produce("aws", b"v", key=b"k", on_delivery=lambda e, m: delivered.append(e))
        assert producer.flush(30) == 0 and delivered == [None]
        assert sts.requests[0]["SigningAlgorithm"] == "RS256"
        assert sts.requests[0]["DurationSeconds"] == "900"
        assert "/eu-west-1/sts/aws4_request" in sts.requests[0]["Authorization"]
