"""Where an OAUTHBEARER client gets its tokens (``sasl.mechanism=OAUTHBEARER``).

The sources, chosen by the configuration (:class:`~.config.ClientConfig`,
:func:`token_provider_for`):

* **Your provider** (``sasl_oauth_token_provider``): a callable, or an object with
  a ``token()`` method as kafka-python's and aiokafka's ``AbstractTokenProvider``
  have (and optionally ``extensions()``). Either may be a coroutine function. It
  returns the token (a string), or ``(token, extensions)``. It is asked once
  per new connection, so it should cache its token itself.
* **OIDC client credentials** (``sasl_oauthbearer_method="oidc"``, KIP-768, as in
  Java and librdkafka): :class:`OidcTokenProvider` posts ``grant_type=
  client_credentials`` (HTTP basic authentication with the client id and
  secret, and the scope if set) to ``sasl_oauthbearer_token_endpoint_url`` and
  caches the ``access_token`` until 80% of its lifetime has passed (the
  ``expires_in`` of the answer, else the token's ``exp`` claim).
* **AWS IAM** (``sasl_oauthbearer_metadata_authentication_type="aws_iam"``
  with ``oidc``): tokens from AWS STS ``GetWebIdentityToken``, see
  :mod:`.oauth_aws`.
* **Unsecured tokens** (``enable_sasl_oauthbearer_unsecure_jwt``, librdkafka's
  development mode): :class:`UnsecuredTokenProvider` makes ``alg: none`` tokens
  from ``sasl_oauthbearer_config`` (``principal=alice scope=a,b lifeSeconds=600
  extension_traceId=42``), for brokers that validate unsecured tokens (Kafka's
  default, and brokerlite).

``sasl_oauthbearer_extensions`` (``key=value,key=value``) adds SASL extensions
(KIP-342) to the tokens of the built-in sources. Tokens never appear in errors,
logs or ``repr``.
"""

from __future__ import annotations

import base64
import inspect
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

import anyio

from trafka.codec.oauthbearer import unsecured_token

from .errors import AuthenticationError, ConfigError

__all__ = [
    "OidcTokenProvider",
    "UnsecuredTokenProvider",
    "fetch_token",
    "parse_extensions",
    "token_provider_for",
]

# Refresh a cached token once this share of its lifetime has passed (Java's 0.8).
_REFRESH_AT = 0.8


def parse_extensions(text: str | None, name: str = "sasl.oauthbearer.extensions") -> dict[str, str]:
    """``key=value,key=value`` as a dict.

    Raises:
        ConfigError: a pair without ``=``.
    """
    out: dict[str, str] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{name}: expected key=value pairs, got {item.strip()!r}")
        out[key.strip()] = value.strip()
    return out


class UnsecuredTokenProvider:
    """Unsecured (``alg: none``) tokens from librdkafka's ``sasl.oauthbearer.config``.

    Args:
        config: space-separated ``name=value`` settings: ``principal`` (required),
            ``principalClaimName`` (``sub``), ``scope`` (comma-separated),
            ``scopeClaimName`` (``scope``), ``lifeSeconds`` (3600) and
            ``extension_<name>=<value>``.
        extensions: more SASL extensions.

    Raises:
        ConfigError: no principal, an unknown setting or a bad number.
    """

    def __init__(self, config: str, extensions: Mapping[str, str] | None = None) -> None:
        settings: dict[str, str] = {}
        self._extensions = dict(extensions or {})
        for item in config.split():
            key, sep, value = item.partition("=")
            if not sep:
                raise ConfigError(f"sasl.oauthbearer.config: expected name=value, got {item!r}")
            if key.startswith("extension_"):
                self._extensions[key[len("extension_") :]] = value
            elif key in (
                "principal",
                "principalClaimName",
                "scope",
                "scopeClaimName",
                "lifeSeconds",
            ):
                settings[key] = value
            else:
                raise ConfigError(f"sasl.oauthbearer.config: unknown setting {key!r}")
        if not settings.get("principal"):
            raise ConfigError("sasl.oauthbearer.config: principal=<name> is required")
        try:
            self._lifetime_ms = int(settings.get("lifeSeconds", "3600")) * 1000
        except ValueError:
            raise ConfigError("sasl.oauthbearer.config: lifeSeconds must be an integer") from None
        if self._lifetime_ms <= 0:
            raise ConfigError("sasl.oauthbearer.config: lifeSeconds must be positive")
        self._principal = settings["principal"]
        self._principal_claim = settings.get("principalClaimName", "sub")
        self._scope_claim = settings.get("scopeClaimName", "scope")
        self._scopes = [s for s in settings.get("scope", "").split(",") if s]
        self._cached: tuple[str, float] | None = None

    def token(self) -> str:
        """A valid token (a new one once 80% of the last one's lifetime has passed)."""
        now = time.time()
        if self._cached is not None and now < self._cached[1]:
            return self._cached[0]
        now_ms = int(now * 1000)
        claims: dict[str, Any] = {}
        if self._scopes:
            claims[self._scope_claim] = self._scopes
        token = unsecured_token(
            self._principal,
            now_ms=now_ms,
            lifetime_ms=self._lifetime_ms,
            principal_claim=self._principal_claim,
            claims=claims,
        )
        self._cached = (token, now + self._lifetime_ms / 1000 * _REFRESH_AT)
        return token

    def extensions(self) -> dict[str, str]:
        return dict(self._extensions)

    def __repr__(self) -> str:
        return f"UnsecuredTokenProvider(principal={self._principal!r})"


class OAuthCallbackProvider:
    """confluent-kafka's ``oauth_cb`` as a token source: ``oauth_cb(config)``,
    ``config`` being ``sasl.oauthbearer.config``, returns ``(token,
    expiry)``, or ``(token, expiry, principal, extensions)``; the token is
    kept until its ``expiry`` (seconds since the epoch) is 80% gone."""

    def __init__(self, callback: Any, config: str | None) -> None:
        self._callback = callback
        self._config = config or ""
        self._cached: tuple[str, dict[str, str], float] | None = None

    def token(self) -> tuple[str, dict[str, str]]:
        now = time.time()
        if self._cached is None or now >= self._cached[2]:
            answer = self._callback(self._config)
            token, expiry = answer[0], float(answer[1])
            extensions = dict(answer[3]) if len(answer) > 3 and answer[3] else {}
            self._cached = (token, extensions, now + max(expiry - now, 0.0) * _REFRESH_AT)
        return self._cached[0], self._cached[1]

    def __repr__(self) -> str:
        return f"OAuthCallbackProvider({self._callback!r})"


class OidcTokenProvider:
    """OAuth 2 client credentials against a token endpoint (KIP-768's login handler).

    Args:
        token_endpoint_url: the IdP's token endpoint (``https://...``; ``http://``
            is allowed for local test servers).
        client_id / client_secret: the client's credentials (HTTP basic auth).
        scope: the scope to ask for, if any.
        extensions: SASL extensions sent with every token.
        timeout: seconds to wait for the endpoint.
    """

    def __init__(
        self,
        token_endpoint_url: str,
        client_id: str,
        client_secret: str,
        *,
        scope: str | None = None,
        extensions: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> None:
        if urllib.parse.urlsplit(token_endpoint_url).scheme not in ("http", "https"):
            raise ConfigError(
                f"sasl.oauthbearer.token.endpoint.url must be an http(s) URL, got "
                f"{token_endpoint_url!r}"
            )
        self.token_endpoint_url = token_endpoint_url
        self._client_id = client_id
        self._client_secret = client_secret
        self._scope = scope
        self._extensions = dict(extensions or {})
        self._timeout = timeout
        self._cached: tuple[str, float] | None = None
        self._lock: anyio.Lock | None = None

    async def token(self) -> str:
        """The cached token, or a new one from the endpoint.

        Raises:
            AuthenticationError: the endpoint refused the credentials or gave no token.
        """
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            if self._cached is not None and time.time() < self._cached[1]:
                return self._cached[0]
            token, lifetime = await anyio.to_thread.run_sync(self._request)
            self._cached = (token, time.time() + lifetime * _REFRESH_AT)
            return token

    def extensions(self) -> dict[str, str]:
        return dict(self._extensions)

    def _request(self) -> tuple[str, float]:
        form = {"grant_type": "client_credentials"}
        if self._scope:
            form["scope"] = self._scope
        basic = base64.b64encode(
            f"{urllib.parse.quote(self._client_id)}:{urllib.parse.quote(self._client_secret)}".encode()
        ).decode()
        request = urllib.request.Request(
            self.token_endpoint_url,
            data=urllib.parse.urlencode(form).encode(),
            headers={
                "Authorization": f"Basic {basic}",
                "Content-Type": "application/x-www-form-urlencoded",
                "Accept": "application/json",
            },
            method="POST",
        )
        where = self.token_endpoint_url
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:
                body = response.read(1 << 20)
        except urllib.error.HTTPError as exc:
            raise AuthenticationError(
                f"the OAuth token endpoint {where} refused the client credentials (HTTP {exc.code})"
            ) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise AuthenticationError(
                f"the OAuth token endpoint {where} failed: {reason}"
            ) from None
        try:
            answer = json.loads(body)
            token = answer["access_token"]
        except (ValueError, KeyError, TypeError):
            raise AuthenticationError(
                f"the OAuth token endpoint {where} answered without an access_token"
            ) from None
        if not isinstance(token, str) or not token:
            raise AuthenticationError(f"the OAuth token endpoint {where} gave an empty token")
        lifetime = answer.get("expires_in")
        if not isinstance(lifetime, int | float) or lifetime <= 0:
            lifetime = _lifetime_from_claims(token)
        return token, float(lifetime)

    def __repr__(self) -> str:
        return f"OidcTokenProvider({self.token_endpoint_url!r}, client_id={self._client_id!r})"


def _lifetime_from_claims(token: str) -> float:
    """Seconds until the token's ``exp`` claim; 60 when it cannot be read."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return max(1.0, float(claims["exp"]) - time.time())
    except (IndexError, ValueError, KeyError, TypeError):
        return 60.0


def token_provider_for(
    config: Any,
    client_id: str | None,
    client_secret: str | None,
    scope: str | None,
    jaas_principal: str | None,
) -> Any:
    """The token provider a client's OAUTHBEARER settings describe
    (:class:`~.config.ClientConfig`'s ``oauth_cb``,
    ``sasl_oauthbearer_metadata_authentication_type``, ``sasl_oauthbearer_method``,
    ``sasl_oauthbearer_config``...), the OIDC credentials and scope being the
    settings' or else ``sasl.jaas.config``'s, and ``jaas_principal`` its
    ``unsecuredLoginStringClaim_sub``.

    Raises:
        ConfigError: they describe no token source, or an incomplete one.
        ImportError: AWS IAM tokens (:mod:`.oauth_aws`) without boto3.
    """
    if (
        config.oauth_cb is None
        and config.sasl_oauthbearer_metadata_authentication_type == "aws_iam"
    ):
        from .oauth_aws import aws_iam_token_provider

        return aws_iam_token_provider(
            config.sasl_oauthbearer_method,
            config.sasl_oauthbearer_config,
            config.sasl_oauthbearer_extensions,
        )
    extensions = parse_extensions(config.sasl_oauthbearer_extensions)
    if config.oauth_cb is not None:
        return OAuthCallbackProvider(config.oauth_cb, config.sasl_oauthbearer_config)
    if config.sasl_oauthbearer_method == "oidc":
        if not (config.sasl_oauthbearer_token_endpoint_url and client_id and client_secret):
            raise ConfigError(
                "sasl.oauthbearer.method=oidc needs sasl.oauthbearer.token.endpoint.url, "
                "sasl.oauthbearer.client.id and sasl.oauthbearer.client.secret"
            )
        return OidcTokenProvider(
            config.sasl_oauthbearer_token_endpoint_url,
            client_id,
            client_secret,
            scope=scope,
            extensions=extensions,
            timeout=config.request_timeout_ms / 1000,
        )
    if config.enable_sasl_oauthbearer_unsecure_jwt and config.sasl_oauthbearer_config:
        return UnsecuredTokenProvider(config.sasl_oauthbearer_config, extensions)
    if jaas_principal:
        return UnsecuredTokenProvider(f"principal={jaas_principal}", extensions)
    raise ConfigError(
        "sasl.mechanism OAUTHBEARER needs a token source: sasl_oauth_token_provider, oauth_cb, "
        "sasl.oauthbearer.method=oidc with a token endpoint and client credentials, "
        "sasl.oauthbearer.metadata.authentication.type=aws_iam, "
        "or enable.sasl.oauthbearer.unsecure.jwt with sasl.oauthbearer.config"
    )


async def fetch_token(provider: Any) -> tuple[str, dict[str, str]]:
    """Ask a token provider (see the module docstring) for ``(token, extensions)``.

    Raises:
        AuthenticationError: the provider failed or returned something else than a token.
    """
    try:
        getter = getattr(provider, "token", None)
        result = getter() if callable(getter) else provider()
        if inspect.isawaitable(result):
            result = await result
        extensions: Any = {}
        if isinstance(result, tuple) and len(result) == 2:
            result, extensions = result
        else:
            more = getattr(provider, "extensions", None)
            if callable(more):
                extensions = more()
                if inspect.isawaitable(extensions):
                    extensions = await extensions
    except AuthenticationError:
        raise
    except Exception as exc:
        raise AuthenticationError(
            f"the OAuth token provider failed: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(result, str) or not result:
        raise AuthenticationError(
            f"the OAuth token provider returned {type(result).__name__}, not a token string"
        )
    if not isinstance(extensions, Mapping):
        raise AuthenticationError("the OAuth token provider's extensions are not a mapping")
    return result, {str(k): str(v) for k, v in (extensions or {}).items()}
