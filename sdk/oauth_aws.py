"""OAUTHBEARER tokens from AWS IAM: STS ``GetWebIdentityToken`` (outbound
identity federation), as confluent-kafka 2.16 gets them.

Chosen by ``sasl.oauthbearer.metadata.authentication.type=aws_iam`` with
``sasl.oauthbearer.method=oidc``. The client's AWS credentials (boto3's usual
chain: environment, profile, container or instance role) sign a
``GetWebIdentityToken`` request; STS answers a JWT signed by AWS whose ``sub``
is the IAM role's ARN, which the broker validates against AWS's key set.

``sasl.oauthbearer.config`` holds comma-separated ``key=value`` settings
(librdkafka's grammar: ``\\`` escapes the next character, so ``\\,`` is a comma
in a value; blanks around a field are dropped):

* ``region`` (required): the STS region;
* ``audience`` (required): the token's ``aud``, the audience the broker expects;
* ``duration_seconds``: the token's lifetime, 60 to 3600 (300);
* ``signing_algorithm``: ``ES384`` (the default) or ``RS256``;
* ``sts_endpoint``: another STS endpoint URL (FIPS, a VPC endpoint);
* ``aws_debug``: ``none`` (the default) or ``console`` (botocore's debug log
  to stderr, for the whole process);
* ``tag_<name>=<value>``: up to 50 custom claims (STS's ``Tags``).

``sasl.oauthbearer.extensions`` (``key=value,...``, the same grammar) adds SASL
extensions. A token is reused until 80% of its lifetime (from the moment it was
asked for to STS's ``Expiration``) has passed.

boto3 is needed (the ``oauthbearer-aws`` extra) and imported only when this
source is configured.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import importlib
import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import anyio

from .errors import ConfigError

__all__ = [
    "AWS_IAM",
    "AwsIamSettings",
    "AwsIamToken",
    "AwsIamTokenProvider",
    "aws_iam_token_provider",
    "parse_aws_iam_config",
    "parse_aws_iam_extensions",
    "principal_of",
    "split_key_values",
]

#: ``sasl.oauthbearer.metadata.authentication.type``'s value that selects this source.
AWS_IAM = "aws_iam"

_TYPE_KEY = "sasl.oauthbearer.metadata.authentication.type"
_METHOD_KEY = "sasl.oauthbearer.method"
_CONFIG_KEY = "sasl.oauthbearer.config"
_EXTENSIONS_KEY = "sasl.oauthbearer.extensions"

# The oldest boto3 whose STS client has GetWebIdentityToken.
_MIN_BOTO3 = (1, 42, 25)
_INSTALL = "pip install 'trafka[oauthbearer-aws]'"

_ALGORITHMS = ("ES384", "RS256")
_DEBUG_VALUES = ("none", "console")
_MIN_DURATION, _MAX_DURATION = 60, 3600
_MAX_TAGS = 50
_TAG = "tag_"
_MAX_JWT_CHARS = 8192

# Refresh a cached token once this share of its lifetime has passed (as oauth.py).
_REFRESH_AT = 0.8

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "0": "\0"}
_BLANKS = " \t\n\v\f\r"


def split_key_values(text: str, what: str) -> list[tuple[str, str]]:
    """``text``'s comma-separated ``key=value`` fields, read as librdkafka reads
    its list settings: a backslash takes the next character as it is (``\\t``,
    ``\\n``, ``\\r`` and ``\\0`` stand for TAB, LF, CR and NUL); leading blanks
    that are not escaped and every trailing blank are dropped; empty fields are
    skipped. The key ends at the first ``=``.

    Raises:
        ConfigError: a field without ``=``, or with nothing before it (``what``
            names the setting in the message).
    """
    fields: list[str] = []
    current: list[str] = []
    escaped = False
    for ch in text:
        if escaped:
            current.append(_ESCAPES.get(ch, ch))
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == ",":
            fields.append("".join(current).rstrip(_BLANKS))
            current = []
        elif ch in _BLANKS and not current:
            continue
        else:
            current.append(ch)
    fields.append("".join(current).rstrip(_BLANKS))
    pairs = []
    for item in fields:
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"Malformed entry '{item}' in {what} (expected key=value).")
        pairs.append((key, value))
    return pairs


def parse_aws_iam_extensions(text: str | None) -> dict[str, str]:
    """``sasl.oauthbearer.extensions`` as a dict (the last of a repeated key wins).

    Raises:
        ConfigError: a malformed field.
    """
    return dict(split_key_values(text or "", _EXTENSIONS_KEY))


@dataclasses.dataclass(frozen=True)
class AwsIamSettings:
    """What ``sasl.oauthbearer.config`` says for AWS IAM tokens (see the module)."""

    region: str
    audience: str
    duration_seconds: int = 300
    signing_algorithm: str = "ES384"
    sts_endpoint: str | None = None
    aws_debug: str = "none"
    tags: Mapping[str, str] = dataclasses.field(default_factory=dict)
    extensions: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("region", "audience"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ConfigError(f"{_CONFIG_KEY} {name!r} must not be empty.")
        if self.signing_algorithm not in _ALGORITHMS:
            raise ConfigError(
                f"{_CONFIG_KEY} 'signing_algorithm' must be 'ES384' or 'RS256'; "
                f"got {self.signing_algorithm!r}."
            )
        duration = self.duration_seconds
        if not isinstance(duration, int) or isinstance(duration, bool):
            raise ConfigError(f"{_CONFIG_KEY} 'duration_seconds' must be an integer.")
        if not _MIN_DURATION <= duration <= _MAX_DURATION:
            raise ConfigError(
                f"{_CONFIG_KEY} 'duration_seconds' must be between {_MIN_DURATION} and "
                f"{_MAX_DURATION} inclusive; got {duration}."
            )
        if self.sts_endpoint == "":
            raise ConfigError(f"{_CONFIG_KEY} 'sts_endpoint' must not be empty.")
        if self.aws_debug not in _DEBUG_VALUES:
            raise ConfigError(
                f"{_CONFIG_KEY} 'aws_debug' must be one of: none, console. Got {self.aws_debug!r}."
            )
        if len(self.tags) > _MAX_TAGS:
            raise ConfigError(
                f"{_CONFIG_KEY} has {len(self.tags)} tags; AWS allows at most {_MAX_TAGS}."
            )


def parse_aws_iam_config(text: str, extensions: Mapping[str, str] | None = None) -> AwsIamSettings:
    """``sasl.oauthbearer.config``'s AWS settings (the last of a repeated key wins).

    Raises:
        ConfigError: a malformed field, an unknown key, an empty value, a
            missing ``region`` or ``audience``, or a value out of its range.
    """
    given: dict[str, Any] = {}
    tags: dict[str, str] = {}
    for key, value in split_key_values(text, _CONFIG_KEY):
        if key.startswith(_TAG):
            if key == _TAG:
                raise ConfigError(f"{_CONFIG_KEY} tag key {key!r} has empty name.")
            tags[key[len(_TAG) :]] = value
            continue
        if key not in ("region", "audience", "duration_seconds", "signing_algorithm",
                       "sts_endpoint", "aws_debug"):  # fmt: skip
            raise ConfigError(f"Unknown key {key!r} in {_CONFIG_KEY}.")
        if key == "duration_seconds":
            try:
                given[key] = int(value)
            except ValueError:
                raise ConfigError(
                    f"{_CONFIG_KEY} 'duration_seconds' must be an integer; got {value!r}."
                ) from None
            continue
        if not value:
            raise ConfigError(f"{_CONFIG_KEY} {key!r} must not be empty.")
        given[key] = value.lower() if key == "aws_debug" else value
    for name in ("region", "audience"):
        if name not in given:
            raise ConfigError(f"{name!r} is required in {_CONFIG_KEY}.")
    return AwsIamSettings(**given, tags=tags, extensions=dict(extensions or {}))


class AwsIamToken(NamedTuple):
    """One answer of STS: the JWT, when it expires (seconds since the epoch),
    its principal (the ``sub`` claim) and the SASL extensions sent with it."""

    token: str
    expiry: float
    principal: str
    extensions: dict[str, str]

    def __repr__(self) -> str:  # never show the token
        return f"AwsIamToken(principal={self.principal!r}, expiry={self.expiry!r})"


def principal_of(jwt: str) -> str:
    """The ``sub`` claim of a JWT, read without checking its signature (STS
    signed it; the broker checks it).

    Raises:
        ValueError: not a JWT, or no non-empty string ``sub`` in it.
    """
    if not jwt:
        raise ValueError("the JWT is empty")
    if len(jwt) > _MAX_JWT_CHARS:
        raise ValueError(f"the JWT is {len(jwt)} characters long, more than {_MAX_JWT_CHARS}")
    parts = jwt.split(".")
    if len(parts) != 3:
        raise ValueError(f"a JWT has 3 parts separated by '.', this one {len(parts)}")
    payload = parts[1]
    if not payload or len(payload) % 4 == 1:
        raise ValueError("the JWT's payload is not base64url")
    try:
        raw = base64.b64decode(
            payload.replace("-", "+").replace("_", "/") + "=" * (-len(payload) % 4), validate=True
        )
        claims = json.loads(raw.decode("utf-8"))
    except (binascii.Error, UnicodeError, ValueError):
        raise ValueError("the JWT's payload is not base64url-encoded JSON") from None
    sub = claims.get("sub") if isinstance(claims, dict) else None
    if not isinstance(sub, str) or not sub:
        raise ValueError("the JWT has no 'sub' claim (a non-empty string)")
    return sub


def _import_boto3() -> Any:
    """boto3, or an ImportError naming the extra to install (and not boto3
    itself, nor chained to the original error: the extra is what to install)."""
    try:
        boto3 = importlib.import_module("boto3")
    except ImportError:
        boto3 = None
    if boto3 is None:
        raise ImportError(
            f"Config '{_TYPE_KEY}={AWS_IAM}' requires the optional 'oauthbearer-aws' extra. "
            f"Install with:\n    {_INSTALL}"
        )
    # (the leading digits of each part: "1.42.0rc1" is 1.42.0)
    version = tuple(int(re.match(r"\d*", p).group() or 0)  # type: ignore[union-attr]
                    for p in str(boto3.__version__).split(".")[:3])  # fmt: skip
    if version < _MIN_BOTO3:
        raise ImportError(
            f"'{_TYPE_KEY}={AWS_IAM}' needs boto3>={'.'.join(map(str, _MIN_BOTO3))} (STS "
            f"GetWebIdentityToken); boto3 {boto3.__version__} is installed. Upgrade with: "
            f"{_INSTALL.replace('install', 'install -U')}"
        )
    return boto3


class AwsIamTokenProvider:
    """Tokens from AWS STS ``GetWebIdentityToken`` for OAUTHBEARER.

    Args:
        settings: what to ask STS for (:func:`parse_aws_iam_config`).
        sts_client: the boto3 STS client to call (else one is made from boto3's
            default credential chain, for ``settings.region`` and
            ``settings.sts_endpoint``).
        clock: seconds since the epoch (``time.time``), for the cache.

    Raises:
        ImportError: boto3 is not installed (or too old).
        ConfigError: boto3 refuses the region or the endpoint.
    """

    def __init__(
        self,
        settings: AwsIamSettings,
        *,
        sts_client: Any = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._cached: tuple[AwsIamToken, float] | None = None
        self._lock: anyio.Lock | None = None
        if sts_client is None:
            boto3 = _import_boto3()
            if settings.aws_debug == "console":
                boto3.set_stream_logger("botocore", logging.DEBUG)
            extra = {"endpoint_url": settings.sts_endpoint} if settings.sts_endpoint else {}
            try:
                session = boto3.Session(region_name=settings.region)
                sts_client = session.client("sts", region_name=settings.region, **extra)
            except ValueError as exc:  # botocore's "Invalid endpoint: ..."
                raise ConfigError(str(exc)) from None
        self._sts = sts_client

    def fetch(self) -> AwsIamToken:
        """A new token from STS (blocking; no cache).

        Raises:
            botocore.exceptions.ClientError / BotoCoreError: STS refused or
                could not be reached.
            ValueError: STS's answer has no token, no expiry, or a token
                without a principal.
        """
        s = self.settings
        request: dict[str, Any] = {
            "Audience": [s.audience],
            "SigningAlgorithm": s.signing_algorithm,
            "DurationSeconds": s.duration_seconds,
        }
        if s.tags:
            request["Tags"] = [{"Key": k, "Value": v} for k, v in s.tags.items()]
        answer = self._sts.get_web_identity_token(**request)
        jwt = answer.get("WebIdentityToken")
        if not isinstance(jwt, str) or not jwt:
            raise ValueError("STS answered GetWebIdentityToken without a WebIdentityToken")
        expiration = answer.get("Expiration")
        if expiration is None:
            raise ValueError("STS answered GetWebIdentityToken without an Expiration")
        return AwsIamToken(jwt, expiration.timestamp(), principal_of(jwt), dict(s.extensions))

    def __call__(self, oauthbearer_config: str = "") -> tuple[str, float, str, dict[str, str]]:
        """confluent-kafka's ``oauth_cb``: a new token as ``(token, expiry,
        principal, extensions)`` (the argument, ``sasl.oauthbearer.config``,
        was read when the provider was made)."""
        return tuple(self.fetch())  # type: ignore[return-value]

    def current(self) -> AwsIamToken:
        """The cached token, or a new one once 80% of its lifetime has passed (blocking)."""
        now = self._clock()
        if self._cached is not None and now < self._cached[1]:
            return self._cached[0]
        answer = self.fetch()
        self._cached = (answer, now + max(answer.expiry - now, 0.0) * _REFRESH_AT)
        return answer

    async def token(self) -> str:
        """The cached token, or a new one from STS (asked in a worker thread)."""
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            cached = self._cached
            if cached is not None and self._clock() < cached[1]:
                return cached[0].token
            return (await anyio.to_thread.run_sync(self.current)).token

    def extensions(self) -> dict[str, str]:
        return dict(self.settings.extensions)

    def __repr__(self) -> str:
        s = self.settings
        return f"AwsIamTokenProvider(region={s.region!r}, audience={s.audience!r})"


def aws_iam_token_provider(
    method: Any = None,
    config: Any = None,
    extensions: Any = None,
    *,
    sts_client: Any = None,
) -> AwsIamTokenProvider:
    """The provider ``sasl.oauthbearer.metadata.authentication.type=aws_iam``
    asks for, from the other OAUTHBEARER settings, checked in confluent-kafka's
    order: the method, the config's presence, boto3, the extensions, the config.

    Args:
        method: ``sasl.oauthbearer.method`` (None: not set); must be ``oidc``.
        config: ``sasl.oauthbearer.config``, the AWS settings (see the module).
        extensions: ``sasl.oauthbearer.extensions``.
        sts_client: see :class:`AwsIamTokenProvider`.

    Raises:
        ConfigError: a setting is missing or invalid.
        ImportError: boto3 (the ``oauthbearer-aws`` extra) is missing.
    """
    if method != "oidc":
        shown = (
            "<unset>" if method is None
            else repr(method) if isinstance(method, str) else "<non-string>"
        )  # fmt: skip
        raise ConfigError(
            f"'{_TYPE_KEY}={AWS_IAM}' requires '{_METHOD_KEY}=oidc'. Current value: {shown}. "
            "method=oidc is mandatory for the AWS IAM authentication path."
        )
    if not config:
        raise ConfigError(
            f"'{_TYPE_KEY}={AWS_IAM}' is set but '{_CONFIG_KEY}' is missing or empty. The AWS "
            f"IAM autowire path requires region and audience to be supplied via {_CONFIG_KEY} "
            '(e.g. "region=us-east-1,audience=https://...").'
        )
    if sts_client is None:
        _import_boto3()
    ext = parse_aws_iam_extensions(None if extensions is None else str(extensions))
    settings = parse_aws_iam_config(str(config), ext)
    return AwsIamTokenProvider(settings, sts_client=sts_client)
