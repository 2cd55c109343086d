"""OAUTHBEARER tokens from AWS IAM (``trafka.sdk.oauth_aws``) against a local STS:
an HTTP server the test starts, which reads boto3's signed ``GetWebIdentityToken``
request (AWS's query protocol) and answers as STS does, with a JWT signed by a
key the test makes. Then brokerlite, checking those JWTs against the key's JWK
set, lets the SDK's producer in with them.

Covered: the request boto3 sends (audience, algorithm, lifetime, tags, SigV4 for
the region), the token, expiry, principal (``sub``) and extensions handed back,
the cache until 80% of the lifetime (a clock the test moves), STS's refusal,
the checks of ``sasl.oauthbearer.config`` and the other settings, the
ImportError without boto3, and the setting in the SDK's configuration.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("boto3")
pytest.importorskip("cryptography")

from fake_sts import AUDIENCE, ROLE, FakeSts, aws_environment
from oauth_keys import jwks

from trafka.sdk import AuthenticationError, ConfigError, open_producer
from trafka.sdk.config import ClientConfig
from trafka.sdk.oauth import fetch_token
from trafka.sdk.oauth_aws import (
    AwsIamTokenProvider,
    aws_iam_token_provider,
    parse_aws_iam_config,
    principal_of,
    split_key_values,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    aws_environment(monkeypatch, tmp_path)


@pytest.fixture
def sts() -> Iterator[FakeSts]:
    fake = FakeSts()
    yield fake
    fake.close()


def test_a_token_from_sts_with_what_the_config_asks(sts: FakeSts) -> None:
    provider = aws_iam_token_provider(
        "oidc",
        f"region=eu-west-1, audience={AUDIENCE},duration_seconds=900,signing_algorithm=RS256,"
        f"sts_endpoint={sts.url},tag_team=platform,tag_env=prod",
        "logicalCluster=lkc-1,identityPoolId=pool-2",
    )
    token, expiry, principal, extensions = provider("ignored")
    [request] = sts.requests
    assert (token, principal) == (sts.issued[0], ROLE)
    assert extensions == {"logicalCluster": "lkc-1", "identityPoolId": "pool-2"}
    assert abs(expiry - (time.time() + 900)) < 60
    assert request["Action"] == "GetWebIdentityToken" and request["Version"] == "2011-06-15"
    assert request["Audience.member.1"] == AUDIENCE and "Audience.member.2" not in request
    assert (request["SigningAlgorithm"], request["DurationSeconds"]) == ("RS256", "900")
    assert request["Tags.member.1.Key"] == "team" and request["Tags.member.1.Value"] == "platform"
    assert request["Tags.member.2.Key"] == "env" and request["Tags.member.2.Value"] == "prod"
    # signed by boto3 with the environment's key, for STS in the configured region
    auth = request["Authorization"]
    assert auth.startswith("AWS4-HMAC-SHA256 Credential=AKIDTRAFKATEST/")
    assert "/eu-west-1/sts/aws4_request" in auth and "Signature=" in auth


def test_the_defaults_es384_and_300_seconds(sts: FakeSts) -> None:
    provider = aws_iam_token_provider(
        "oidc", f"region=us-east-1,audience={AUDIENCE},sts_endpoint={sts.url}"
    )
    assert provider.fetch().extensions == {}
    [request] = sts.requests
    assert (request["SigningAlgorithm"], request["DurationSeconds"]) == ("ES384", "300")
    assert not any(k.startswith("Tags") for k in request)
    assert repr(provider.fetch()).startswith("AwsIamToken(principal=")  # no token in repr


def test_a_token_is_kept_until_80_percent_of_its_lifetime() -> None:
    now = [1_800_000_000.0]
    fake = FakeSts(now=lambda: now[0])
    try:
        settings = parse_aws_iam_config(
            f"region=us-east-1,audience={AUDIENCE},duration_seconds=1000,sts_endpoint={fake.url}",
            {"k": "v"},
        )
        provider = AwsIamTokenProvider(settings, clock=lambda: now[0])

        async def ask() -> tuple[str, dict[str, str]]:
            return await fetch_token(provider)

        first = anyio.run(ask)
        assert first == (fake.issued[0], {"k": "v"})
        now[0] += 799
        assert anyio.run(ask) == first and len(fake.requests) == 1
        now[0] += 1  # 800 of 1000 s: a new token
        second = anyio.run(ask)
        assert len(fake.requests) == 2 and second[0] == fake.issued[1] != first[0]
        now[0] += 500
        assert anyio.run(ask) == second and len(fake.requests) == 2
    finally:
        fake.close()


def test_sts_refusing_fails_the_token_with_its_reason(sts: FakeSts) -> None:
    sts.refuse = True
    provider = aws_iam_token_provider(
        "oidc", f"region=us-east-1,audience={AUDIENCE},sts_endpoint={sts.url}"
    )
    with pytest.raises(AuthenticationError, match="AccessDenied"):
        anyio.run(fetch_token, provider)


@pytest.mark.parametrize(
    ("method", "config", "extensions", "message"),
    [
        (None, "region=r,audience=a", None, "requires 'sasl.oauthbearer.method=oidc'. Current value: <unset>"),
        ("OIDC", "region=r,audience=a", None, "Current value: 'OIDC'"),
        (7, "region=r,audience=a", None, "Current value: <non-string>"),
        ("oidc", None, None, "'sasl.oauthbearer.config' is missing or empty"),
        ("oidc", "", None, "'sasl.oauthbearer.config' is missing or empty"),
        ("oidc", " , ", None, "'region' is required in sasl.oauthbearer.config"),
        ("oidc", "region=r", None, "'audience' is required"),
        ("oidc", "region=r,audience=a,color=red", None, "Unknown key 'color' in sasl.oauthbearer.config"),
        ("oidc", "region=r,audience=a,extension_x=1", None, "Unknown key 'extension_x'"),
        ("oidc", "region=r,audience=a,signing_algorithm=es384", None, "must be 'ES384' or 'RS256'; got 'es384'"),
        ("oidc", "region=r,audience=a,duration_seconds=59", None, "between 60 and 3600 inclusive; got 59"),
        ("oidc", "region=r,audience=a,duration_seconds=3601", None, "got 3601"),
        ("oidc", "region=r,audience=a,duration_seconds=5m", None, "must be an integer; got '5m'"),
        ("oidc", "region=r,audience=a,aws_debug=verbose", None, "one of: none, console. Got 'verbose'"),
        ("oidc", "region=,audience=a", None, "'region' must not be empty"),
        ("oidc", "region=r,audience=a,sts_endpoint=", None, "'sts_endpoint' must not be empty"),
        ("oidc", "region=r,audience=a,tag_=x", None, "tag key 'tag_' has empty name"),
        ("oidc", "region=r,audience=a,nothing", None, "Malformed entry 'nothing' in sasl.oauthbearer.config"),
        ("oidc", "region=r,audience=a," + ",".join(f"tag_{i}=v" for i in range(51)), None, "51 tags; AWS allows at most 50"),
        ("oidc", "region=r,audience=a,sts_endpoint=not a url", None, "Invalid endpoint: not a url"),
        ("oidc", "region=r,audience=a", "=v", "Malformed entry '=v' in sasl.oauthbearer.extensions"),
        # the extensions are read before the config
        ("oidc", "color=red", "x", "Malformed entry 'x' in sasl.oauthbearer.extensions"),
    ],
)  # fmt: skip
def test_the_settings_are_checked(method: Any, config: Any, extensions: Any, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        aws_iam_token_provider(method, config, extensions)
    assert message in str(info.value)


def test_what_is_taken() -> None:
    settings = parse_aws_iam_config(
        "region=r,audience=a\\,b,aws_debug=NONE,tag_t=,tag_t=2,region=s,duration_seconds=3600"
    )
    assert (settings.region, settings.audience, settings.aws_debug) == ("s", "a,b", "none")
    assert (settings.duration_seconds, dict(settings.tags)) == (3600, {"t": "2"})
    assert split_key_values("  a = 1 ,b=x=y,\\ c=\\t\\z,,d=e\\ ", "x") == [
        ("a ", " 1"),
        ("b", "x=y"),
        (" c", "\tz"),
        ("d", "e"),
    ]


def test_without_boto3_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)
    with pytest.raises(ImportError) as info:
        aws_iam_token_provider("oidc", "region=r,audience=a")
    text = str(info.value)
    assert "pip install 'trafka[oauthbearer-aws]'" in text and "aws_iam" in text
    assert "boto3" not in text
    assert info.value.__cause__ is None and info.value.__context__ is None
    # the checks before it still come first
    with pytest.raises(ConfigError, match="missing or empty"):
        aws_iam_token_provider("oidc", "")


@pytest.mark.parametrize(
    ("jwt", "message"),
    [
        ("", "empty"),
        ("a.b", "3 parts"),
        ("a..c", "not base64url"),
        ("a.!!!!.c", "not base64url"),
        ("a.bnVsbA.c", "no 'sub'"),  # null
        ("a.eyJzdWIiOiIifQ.c", "no 'sub'"),  # {"sub":""}
        ("a.eyJzdWIiOjF9.c", "no 'sub'"),  # {"sub":1}
        ("a." + "A" * 9000 + ".c", "more than 8192"),
    ],
)
def test_the_principal_is_the_sub_claim(jwt: str, message: str) -> None:
    assert principal_of("x.eyJzdWIiOiJhcm46YXdzOmlhbTo6MTpyb2xlL1IifQ.y") == "arn:aws:iam::1:role/R"
    with pytest.raises(ValueError, match=message):
        principal_of(jwt)


def test_the_sdk_configuration_selects_it(sts: FakeSts) -> None:
    base = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.config": f"region=us-east-1,audience={AUDIENCE},sts_endpoint={sts.url}",
        "sasl.oauthbearer.extensions": "a=1",
    }
    config = ClientConfig.from_dict(
        {**base, "sasl.oauthbearer.metadata.authentication.type": "AWS_IAM"}
    )
    provider = config.sasl_oauth_token_provider
    assert isinstance(provider, AwsIamTokenProvider) and provider.extensions() == {"a": "1"}
    assert config.sasl_oauthbearer_metadata_authentication_type == "aws_iam"
    assert ClientConfig().sasl_oauthbearer_metadata_authentication_type == "none"
    with pytest.raises(ConfigError, match="Current value: 'default'"):
        ClientConfig.from_dict(
            {**base, "sasl.oauthbearer.method": "default",
             "sasl.oauthbearer.metadata.authentication.type": "aws_iam"}
        )  # fmt: skip
    with pytest.raises(ConfigError, match=r"azure_imds .* is not supported"):
        ClientConfig.from_dict(
            {**base, "sasl.oauthbearer.metadata.authentication.type": "azure_imds"}
        )
    with pytest.raises(ConfigError, match="invalid value 'gcp'"):
        ClientConfig.from_dict({**base, "sasl.oauthbearer.metadata.authentication.type": "gcp"})


def test_brokerlite_lets_the_sts_token_in(sts: FakeSts, tmp_path: Path) -> None:
    """End to end: brokerlite checks the JWT's signature against STS's key set
    (a file here), its audience and its expiry."""
    from trafka.brokerlite import broker_in_thread

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

        async def produce(audience: str) -> int:
            async with open_producer(
                bootstrap_servers=running.bootstrap_servers,
                security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="OAUTHBEARER",
                sasl_oauthbearer_method="oidc",
                sasl_oauthbearer_metadata_authentication_type="aws_iam",
                sasl_oauthbearer_config=f"region=us-east-1,audience={audience},sts_endpoint={sts.url}",
            ) as producer:
                return int((await (await producer.send("aws", b"v", key=b"k"))).offset)

        assert anyio.run(produce, AUDIENCE) == 0
        assert len(sts.requests) == 1
        with pytest.raises(AuthenticationError, match="audience"):
            anyio.run(produce, "https://elsewhere.example")


def test_boto3_is_imported_only_when_aws_iam_is_configured() -> None:
    code = (
        "import sys\n"
        "from trafka.sdk.config import ClientConfig\n"
        "from trafka.compat.confluent import Producer\n"
        "ClientConfig.from_dict({'security.protocol': 'SASL_PLAINTEXT', 'sasl.mechanism': "
        "'OAUTHBEARER', 'sasl.oauthbearer.config': 'principal=a', "
        "'enable.sasl.oauthbearer.unsecure.jwt': True})\n"
        "Producer({'bootstrap.servers': '127.0.0.1:1'}).flush(0)\n"
        "print(sorted(m for m in sys.modules if m.startswith(('boto', 'trafka.sdk.oauth_aws'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
