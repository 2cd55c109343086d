"""The settings every client shares: :class:`ClientConfig`, and how a
configuration is made from keys in any spelling (:meth:`ClientConfig.from_dict`,
:func:`make_config`).

The rules of every component's settings are the package's (:mod:`trafka.sdk.config`).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from .._validate import INT32_MAX
from ..errors import ConfigError, ConfigWarning
from ..tracing import otel_enabled as _otel_enabled
from ..tracing import otel_provider as _otel_provider
from .keys import _NOT_TAKEN_NORM, _names, _norm
from .values import (
    _NOT_MADE_HERE,
    _PROVIDER_SETTINGS,
    _SECURITY_PROTOCOLS,
    ValueSpec,
    _bool,
    _check_hostname,
    _choice,
    _debug,
    _described,
    _dotted,
    _field,
    _int,
    _listen,
    _logger,
    _made_from,
    _opt_callable,
    _opt_int,
    _opt_str,
    _parse_jaas,
    _sasl_mechanism,
    _servers,
    _split_host_port,
    _ssl_context,
    _str,
    _token_provider,
)

if TYPE_CHECKING:
    from trafka.discovery import DiscoverySpec

__all__ = ["ClientConfig", "components_are", "make_config"]


@_described(ValueSpec("string", choices=("none", "aws_iam"), note="any case"))
def _metadata_authentication(name: str, value: Any) -> str:
    """librdkafka's ``sasl.oauthbearer.metadata.authentication.type``: ``none``
    or ``aws_iam`` (:mod:`trafka.sdk.oauth_aws`); its ``azure_imds`` is refused."""
    text = value.strip().lower() if isinstance(value, str) else value
    if text in ("none", "aws_iam"):
        return str(text)
    if text == "azure_imds":
        raise ConfigError(
            f"{name}=azure_imds (librdkafka's Azure IMDS tokens) is not supported: "
            "pass a sasl_oauth_token_provider (or an oauth_cb) that gets the token"
        )
    raise ConfigError(f"{name}: invalid value {value!r}")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ClientConfig:
    """Connection settings shared by every component.

    Attributes:
        bootstrap_servers: ``host:port`` strings to fetch the first metadata from
            (``[v6-address]:port``, or a host alone, which means port 9092, as
            librdkafka and kafka-python read it); an entry ``zeroconf`` (or
            ``zeroconf:cluster=ID&role=broker``, see :mod:`trafka.discovery`)
            finds brokers announced on the local network.
        client_id: sent in every request header.
        request_timeout_ms: how long to wait for a response before failing the request.
        metadata_max_age_ms: metadata older than this is refreshed.
        reconnect_backoff_ms: first wait before reconnecting to a broker.
        reconnect_backoff_max_ms: the wait doubles per failure up to this.
        retry_backoff_ms: wait before retrying a failed request.
        retry_backoff_max_ms: the retry wait doubles per failure up to this.
        socket_connection_setup_timeout_ms: how long a connect may take: TCP,
            TLS and the ApiVersions handshake, until the connection can serve
            (as librdkafka's).
        connections_max_idle_ms: idle connections are closed after this.
        receive_message_max_bytes: the largest response frame accepted (librdkafka's
            name; Java has no limit, we default to 100 MiB).
        security_protocol: ``plaintext`` (default), ``ssl``, ``sasl_plaintext`` or
            ``sasl_ssl`` (any case, as Kafka spells them).
        sasl_mechanism: ``PLAIN``, ``SCRAM-SHA-256``, ``SCRAM-SHA-512`` or
            ``OAUTHBEARER`` (librdkafka's ``sasl.mechanisms`` is accepted too). Default ``PLAIN``
            (Java's default, GSSAPI, is not supported).
        sasl_username / sasl_password: the SASL credentials (librdkafka's names;
            kafka-python's ``sasl_plain_username``/``sasl_plain_password`` too).
        sasl_jaas_config: Java's form of the credentials, read for its
            ``username="..."`` and ``password="..."`` options (and, with
            OAUTHBEARER, ``clientId``, ``clientSecret``, ``scope`` and
            ``unsecuredLoginStringClaim_sub``).
        sasl_scram_tokenauth: log in with a delegation token (KIP-48): with a
            SCRAM mechanism, ``sasl_username`` is the token id and
            ``sasl_password`` its HMAC in base64 (Java's ``tokenauth="true"``
            in ``sasl.jaas.config`` sets it too; see
            :meth:`~trafka.sdk.delegation_tokens.DelegationToken.client_settings`).
        sasl_oauth_token_provider: with OAUTHBEARER, where tokens come from: a
            callable or an object with ``token()`` (kafka-python's and aiokafka's
            name), sync or async; see :mod:`trafka.sdk.oauth`. Made from the
            settings below when not given.
        sasl_oauthbearer_method: ``default`` (a provider or unsecured tokens) or
            ``oidc`` (client credentials at ``sasl_oauthbearer_token_endpoint_url``
            with ``sasl_oauthbearer_client_id``, ``sasl_oauthbearer_client_secret``
            and ``sasl_oauthbearer_scope``; librdkafka's names).
        sasl_oauthbearer_token_endpoint_url: with ``oidc``, the OAuth server's
            token endpoint, where client credentials are exchanged for tokens.
        sasl_oauthbearer_client_id / sasl_oauthbearer_client_secret: with
            ``oidc``, the client credentials sent to the token endpoint (else
            read from ``sasl_jaas_config``'s ``clientId`` and ``clientSecret``).
        sasl_oauthbearer_scope: with ``oidc``, the scope asked for (else
            ``sasl_jaas_config``'s ``scope``; none when neither is given).
        enable_sasl_oauthbearer_unsecure_jwt / sasl_oauthbearer_config: unsecured
            development tokens, as librdkafka makes them
            (``principal=alice scope=a,b lifeSeconds=600``).
        sasl_oauthbearer_extensions: SASL extensions, ``key=value,key=value``.
        sasl_oauthbearer_metadata_authentication_type: ``aws_iam``, with
            ``sasl_oauthbearer_method="oidc"``: tokens from AWS STS
            ``GetWebIdentityToken`` (the region, audience... in
            ``sasl_oauthbearer_config``; see :mod:`trafka.sdk.oauth_aws`, which
            needs boto3, the ``oauthbearer-aws`` extra); ``none`` (the default).
        ssl_cafile: PEM file of the CAs to trust (default: the system's);
            librdkafka's ``ssl.ca.location``.
        ssl_certfile / ssl_keyfile / ssl_password: the client's certificate,
            its private key and the key's password, for brokers that require
            client certificates (``ssl.certificate.location``,
            ``ssl.key.location``, ``ssl.key.password``).
        ssl_check_hostname: check that the broker's certificate names the host
            connected to (default true; Java's
            ``ssl.endpoint.identification.algorithm`` ``https``/empty).
        ssl_context: an :class:`ssl.SSLContext` to use as it is, instead of the
            ``ssl_*`` files.
        client_rack: the rack sent to brokers for follower fetching (empty: none).
        enable_metrics_push: push the client's metrics to a broker when the
            cluster subscribes to them (KIP-714; see :mod:`trafka.sdk.telemetry`).
            True by default, as Java's producer and consumers; the admin client's
            default is false, as Java's ``AdminClientConfig``.
        metrics_listen: ``host:port``: serve the client's Prometheus metrics
            (``/metrics``, ``/healthz``, ``/readyz``) over HTTP there while it is
            open (see :mod:`trafka.sdk.prometheus`; needs ``prometheus-client``).
        error_cb: called with the errors the client handles by itself by
            retrying, so that its user hears of them (librdkafka's ``error_cb``):
            a :class:`~trafka.sdk.errors.BrokerUnreachableError` each time a
            broker (or a bootstrap address) goes out of reach, and a
            :class:`~trafka.sdk.errors.NoBrokersAvailableError` each time every
            one is (librdkafka's ``_TRANSPORT`` and ``_ALL_BROKERS_DOWN``). It
            runs in the client's event loop and must not block; what it raises
            is logged. Without it, those errors are logged at WARNING (logger
            ``trafka.sdk``).
        throttle_cb: called with a :class:`~trafka.sdk.statistics.brokers.ThrottleEvent`
            each time a broker's response says it throttles this client for a
            quota (librdkafka's ``throttle_cb``); in the client's event loop,
            as ``error_cb``.
        stats_cb / statistics_interval_ms: every ``statistics_interval_ms``
            (0, the default: never), ``stats_cb`` is called with the client's
            statistics as a JSON string in librdkafka's layout (its
            STATISTICS.md; :mod:`trafka.sdk.statistics.librdkafka` says which
            fields trafka fills), so dashboards fed from it keep working.
        logger: a :class:`logging.Logger` that receives the log lines of
            trafka's loggers while the client is open (confluent-kafka's
            ``logger``), from ``log_level`` (syslog's 0-7, librdkafka's
            default 6: INFO) up.
        log_level: the least severe syslog level passed to ``logger``
            (7 DEBUG, 6 and 5 INFO, 4 WARNING, 3 ERROR, 2-0 CRITICAL).
        debug: librdkafka's debug contexts (``broker,cgrp``, ``all``): the
            trafka loggers of those contexts log at DEBUG while the client is
            open (to ``logger`` if given, else to logging's handlers).
        socket_keepalive_enable: set ``SO_KEEPALIVE`` on broker connections
            (librdkafka's; off by default, as there).
        socket_send_buffer_bytes / socket_receive_buffer_bytes: the
            ``SO_SNDBUF`` / ``SO_RCVBUF`` of broker connections; 0 (or Java's
            -1, under its names ``send.buffer.bytes`` / ``receive.buffer.bytes``)
            leaves the operating system's size.
        socket_timeout_ms: librdkafka's timeout of network requests; when set,
            ``request.timeout.ms`` is the larger of the two.
        topic_metadata_refresh_interval_ms: librdkafka's metadata refresh
            interval: sets ``metadata.max.age.ms`` (-1, no periodic refresh,
            sets it to 2147483647 ms).
        message_max_bytes: librdkafka's largest request: the producer's
            ``max.request.size`` (other clients' requests are far smaller).
        api_version_request / broker_version_fallback / api_version_fallback_ms:
            librdkafka's; trafka always asks brokers for their API versions,
            which is what ``api.version.request=true`` means (``false`` is
            refused), and the fallbacks only apply when it does not.
        metrics_num_samples / metrics_sample_window_ms: Java's; trafka's
            windowed metrics always use 2 samples of 30 s, so another window
            is taken with a :class:`~trafka.sdk.errors.ConfigWarning` saying so.
        metrics_recording_level: Java's; trafka keeps every metric, whatever it says.
        metric_reporters: Java's reporter classes; they are not loaded (a
            :class:`~trafka.sdk.errors.ConfigWarning` says so): serve the
            metrics with ``metrics_listen`` or read ``statistics()``.
        oauth_cb: confluent-kafka's OAUTHBEARER token callback:
            ``oauth_cb(sasl_oauthbearer_config)`` returns ``(token,
            expiry_seconds_since_epoch)`` (or with a principal and extensions
            after them); see :class:`~trafka.sdk.oauth.OAuthCallbackProvider`.
        otel_enabled: OpenTelemetry (the ``otel`` extra): the producer's and
            the consumer's spans (:mod:`trafka.sdk.tracing`) and the client's
            metrics as observable instruments (:mod:`trafka.sdk.otel_metrics`),
            through OpenTelemetry's global providers.
        otel_tracer_provider / otel_meter_provider: the providers to use
            instead of the global ones; either one set turns its signal on.
    """

    bootstrap_servers: tuple[str, ...] = _field(
        ("localhost:9092",), _servers, aliases=("metadata.broker.list",)
    )
    client_id: str = _field("trafka", _str)
    request_timeout_ms: int = _field(30_000, _int(1, INT32_MAX))
    metadata_max_age_ms: int = _field(300_000, _int(0))
    reconnect_backoff_ms: int = _field(50, _int(0))
    reconnect_backoff_max_ms: int = _field(1_000, _int(0))
    retry_backoff_ms: int = _field(100, _int(0))
    retry_backoff_max_ms: int = _field(1_000, _int(0))
    socket_connection_setup_timeout_ms: int = _field(10_000, _int(1))
    connections_max_idle_ms: int = _field(540_000, _int(0))
    receive_message_max_bytes: int = _field(100 * 1024 * 1024, _int(1024))
    security_protocol: str = _field("plaintext", _choice(*_SECURITY_PROTOCOLS))
    sasl_mechanism: str = _field("PLAIN", _sasl_mechanism, aliases=("sasl.mechanisms",))
    sasl_username: str | None = _field(None, _opt_str, aliases=("sasl_plain_username",))
    sasl_password: str | None = _field(
        None, _opt_str, aliases=("sasl_plain_password",), secret=True
    )
    sasl_jaas_config: str | None = _field(None, _opt_str, secret=True)
    sasl_scram_tokenauth: bool = _field(False, _bool)
    sasl_oauth_token_provider: Any = _field(None, _token_provider)  # noqa: RUF009
    sasl_oauthbearer_method: str = _field("default", _choice("default", "oidc"))
    enable_sasl_oauthbearer_unsecure_jwt: bool = _field(False, _bool)
    sasl_oauthbearer_config: str | None = _field(None, _opt_str)
    sasl_oauthbearer_token_endpoint_url: str | None = _field(None, _opt_str)
    sasl_oauthbearer_client_id: str | None = _field(None, _opt_str)
    sasl_oauthbearer_client_secret: str | None = _field(None, _opt_str, secret=True)
    sasl_oauthbearer_scope: str | None = _field(None, _opt_str)
    sasl_oauthbearer_extensions: str | None = _field(None, _opt_str)
    sasl_oauthbearer_metadata_authentication_type: str = _field("none", _metadata_authentication)
    ssl_cafile: str | None = _field(None, _opt_str, aliases=("ssl.ca.location",))
    ssl_certfile: str | None = _field(None, _opt_str, aliases=("ssl.certificate.location",))
    ssl_keyfile: str | None = _field(None, _opt_str, aliases=("ssl.key.location",))
    ssl_password: str | None = _field(None, _opt_str, aliases=("ssl.key.password",), secret=True)
    ssl_check_hostname: bool = _field(
        True, _check_hostname, aliases=("ssl.endpoint.identification.algorithm",)
    )
    ssl_context: Any = _field(None, _ssl_context)  # noqa: RUF009
    client_rack: str = _field("", _str)
    enable_metrics_push: bool = _field(True, _bool)
    metrics_listen: str | None = _field(None, _listen)
    error_cb: Any = _field(None, _opt_callable, dotted="error_cb")  # noqa: RUF009
    throttle_cb: Any = _field(None, _opt_callable, dotted="throttle_cb")  # noqa: RUF009
    stats_cb: Any = _field(None, _opt_callable, dotted="stats_cb")  # noqa: RUF009
    statistics_interval_ms: int = _field(0, _int(0, 86_400_000))
    logger: Any = _field(None, _logger, dotted="logger")  # noqa: RUF009
    log_level: int = _field(6, _int(0, 7), dotted="log_level")
    debug: tuple[str, ...] = _field((), _debug)
    socket_keepalive_enable: bool = _field(False, _bool)
    socket_send_buffer_bytes: int = _field(
        0, _int(-1, 100_000_000, unit="bytes"), aliases=("send.buffer.bytes",)
    )
    socket_receive_buffer_bytes: int = _field(
        0, _int(-1, 100_000_000, unit="bytes"), aliases=("receive.buffer.bytes",)
    )
    socket_timeout_ms: int | None = _field(None, _opt_int(10, 300_000))
    topic_metadata_refresh_interval_ms: int | None = _field(None, _opt_int(-1, 3_600_000))
    message_max_bytes: int | None = _field(None, _opt_int(1000, 1_000_000_000))
    api_version_request: bool = _field(True, _bool)
    broker_version_fallback: str | None = _field(None, _opt_str)
    api_version_fallback_ms: int = _field(0, _int(0, 604_800_000))
    metrics_num_samples: int = _field(2, _int(1, INT32_MAX))
    metrics_sample_window_ms: int = _field(30_000, _int(1))
    metrics_recording_level: str = _field("info", _choice("info", "debug", "trace"))
    metric_reporters: str | None = _field(None, _opt_str)
    oauth_cb: Any = _field(None, _opt_callable, dotted="oauth_cb")  # noqa: RUF009
    otel_enabled: bool = _field(False, _otel_enabled)
    otel_tracer_provider: Any = _field(None, _otel_provider("get_tracer"))  # noqa: RUF009
    otel_meter_provider: Any = _field(None, _otel_provider("get_meter"))  # noqa: RUF009

    #: Whether the client's metadata requests may create topics when it has no
    #: ``allow.auto.create.topics`` setting: a producer's may (as Java's), an
    #: admin client's never do (as Kafka's AdminClient's).
    auto_create_topics_default: ClassVar[bool] = True

    def __post_init__(self) -> None:
        problems = []
        for f in dataclasses.fields(self):
            coerce = f.metadata.get("coerce")
            if coerce is not None:
                try:
                    object.__setattr__(self, f.name, coerce(_dotted(f), getattr(self, f.name)))
                except ConfigError as exc:
                    problems += exc.problems
        if problems:
            raise ConfigError.of(problems)
        self._check()

    def _derive(self, attr: str, value: Any, given: str) -> None:
        """Set ``attr`` from another client's setting (``given``) that decides
        it; both set, to different values, is one option given twice."""
        f = next(f for f in dataclasses.fields(self) if f.name == attr)
        if getattr(self, attr) not in (f.default, value):
            raise ConfigError(f"{given!r} and {_dotted(f)!r} set the same option")
        object.__setattr__(self, attr, value)

    def _check(self) -> None:
        if self.socket_timeout_ms is not None and self.socket_timeout_ms > self.request_timeout_ms:
            object.__setattr__(self, "request_timeout_ms", self.socket_timeout_ms)
        refresh = self.topic_metadata_refresh_interval_ms
        if refresh is not None:
            self._derive(
                "metadata_max_age_ms",
                INT32_MAX if refresh == -1 else refresh,
                "topic.metadata.refresh.interval.ms",
            )
        if not self.api_version_request:
            raise ConfigError(
                "api.version.request=false is not supported: trafka always asks each broker "
                "for its API versions (every broker since Kafka 0.10 answers)"
            )
        differs = []
        if (self.metrics_num_samples, self.metrics_sample_window_ms) != (2, 30_000):
            differs.append(
                "metrics.num.samples / metrics.sample.window.ms: trafka's windowed metrics "
                "always use 2 samples of 30 s"
            )
        if self.metric_reporters:
            differs.append(
                "metric.reporters: Java classes are not loaded; serve the metrics with "
                "metrics.listen (Prometheus) or read statistics()"
            )
        for text in differs:
            warnings.warn(text, ConfigWarning, stacklevel=4)
        self._check_security()
        if self.reconnect_backoff_max_ms < self.reconnect_backoff_ms:
            object.__setattr__(self, "reconnect_backoff_max_ms", self.reconnect_backoff_ms)
        if self.retry_backoff_max_ms < self.retry_backoff_ms:
            object.__setattr__(self, "retry_backoff_max_ms", self.retry_backoff_ms)

    def _check_security(self) -> None:
        jaas = _parse_jaas(self.sasl_jaas_config) if self.sasl_jaas_config is not None else {}
        for attr in ("username", "password"):
            if getattr(self, f"sasl_{attr}") is None and attr in jaas:
                object.__setattr__(self, f"sasl_{attr}", jaas[attr])
        if jaas.get("tokenauth", "").lower() == "true":
            object.__setattr__(self, "sasl_scram_tokenauth", True)
        if self.sasl_scram_tokenauth and not self.sasl_mechanism.startswith("SCRAM-"):
            raise ConfigError(
                f"sasl.scram.tokenauth needs a SCRAM sasl.mechanism, not {self.sasl_mechanism}"
            )
        if self.uses_sasl and self.sasl_mechanism == "OAUTHBEARER":
            self._check_oauth(jaas)
        elif self.uses_sasl and (self.sasl_username is None or self.sasl_password is None):
            raise ConfigError(
                f"security.protocol {self.security_protocol.upper()} needs sasl.username "
                "and sasl.password (or sasl.jaas.config)"
            )
        if self.uses_tls and self.ssl_keyfile is not None and self.ssl_certfile is None:
            raise ConfigError("ssl.keyfile is set without ssl.certfile")

    def _check_oauth(self, jaas: Mapping[str, str]) -> None:
        """Make the token provider the OAUTHBEARER settings describe (unless given)."""
        from ..oauth import token_provider_for

        client_id = self.sasl_oauthbearer_client_id or jaas.get("clientId")
        client_secret = self.sasl_oauthbearer_client_secret or jaas.get("clientSecret")
        scope = self.sasl_oauthbearer_scope or jaas.get("scope")
        settings = (
            self.sasl_oauthbearer_method,
            self.enable_sasl_oauthbearer_unsecure_jwt,
            self.sasl_oauthbearer_config,
            self.sasl_oauthbearer_token_endpoint_url,
            client_id,
            client_secret,
            scope,
            self.sasl_oauthbearer_extensions,
            jaas.get("unsecuredLoginStringClaim_sub"),
            self.oauth_cb,
            self.sasl_oauthbearer_metadata_authentication_type,
        )
        current = self.sasl_oauth_token_provider
        if current is not None and _made_from(current) in (_NOT_MADE_HERE, settings):
            return  # the caller's own provider, or the one these settings made
        provider = token_provider_for(self, client_id, client_secret, scope, settings[8])
        _PROVIDER_SETTINGS[provider] = settings
        object.__setattr__(self, "sasl_oauth_token_provider", provider)

    @classmethod
    def _refusal(cls, key: str) -> str | None:
        """Why this component refuses ``key`` although it is a setting of
        another (the error's text), or None."""
        return None

    @property
    def uses_tls(self) -> bool:
        """True when connections are encrypted (``ssl`` and ``sasl_ssl``)."""
        return self.security_protocol in ("ssl", "sasl_ssl")

    @property
    def uses_sasl(self) -> bool:
        """True when connections authenticate with SASL."""
        return self.security_protocol.startswith("sasl_")

    @property
    def bootstrap_addresses(self) -> list[tuple[str, int]]:
        """``bootstrap_servers`` split into (host, port) pairs (zeroconf specs left out)."""
        from trafka.discovery import is_spec  # zeroconf loads only for who asks (issue #48)

        return [
            _split_host_port("bootstrap.servers", s)
            for s in self.bootstrap_servers
            if not is_spec(s)
        ]

    @property
    def discovery_specs(self) -> list[DiscoverySpec]:
        """The zeroconf discovery specs among ``bootstrap_servers``."""
        from trafka.discovery import is_spec, parse_spec

        return [parse_spec(s) for s in self.bootstrap_servers if is_spec(s)]

    @classmethod
    def from_dict(cls: type[_C], mapping: Mapping[str, Any] | None = None, /, **kwargs: Any) -> _C:
        """Build a configuration from Kafka-style and/or Python-style keys.

        Args:
            mapping: keys in dotted (``linger.ms``) or snake (``linger_ms``) form.
            **kwargs: snake-case keys; they override ``mapping``.

        Raises:
            ConfigError: an unknown key, a key given twice under two spellings,
                or an invalid value.
        """
        names = _names(cls)
        values: dict[str, Any] = {}
        problems: list[str] = []  # all of them, in one error
        for source in (mapping or {}, kwargs):
            seen_here: dict[str, str] = {}
            for key, value in source.items():
                if not isinstance(key, str):
                    problems.append(f"configuration keys must be strings, got {key!r}")
                    continue
                attr = names.get(_norm(key))
                if attr is None:
                    problems += _unknown(cls, key).problems
                elif attr in seen_here:
                    problems.append(f"{key!r} and {seen_here[attr]!r} set the same option")
                else:
                    seen_here[attr] = key
                    values[attr] = value
        try:
            config = cls(**values)
        except ConfigError as exc:
            raise ConfigError.of(problems + exc.problems) from None
        if problems:
            raise ConfigError.of(problems)
        return config

    def replace(self: _C, **changes: Any) -> _C:
        """A copy with some settings changed (dotted names allowed as ``**{"linger.ms": 5}``)."""
        current = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return type(self).from_dict(current, **_snake_keys(type(self), changes))

    def to_dict(self) -> dict[str, Any]:
        """The settings under their dotted names."""
        return {_dotted(f): getattr(self, f.name) for f in dataclasses.fields(self)}


_C = TypeVar("_C", bound=ClientConfig)


def _snake_keys(cls: type[ClientConfig], changes: Mapping[str, Any]) -> dict[str, Any]:
    names = _names(cls)
    out = {}
    for key, value in changes.items():
        attr = names.get(_norm(key))
        if attr is None:
            raise _unknown(cls, key)
        out[attr] = value
    return out


def _unknown(cls: type[ClientConfig], key: str) -> ConfigError:
    refusal = cls._refusal(key)
    if refusal is not None:
        return ConfigError(refusal)
    why = _NOT_TAKEN_NORM.get(_norm(key))
    if why is not None:
        return ConfigError(f"{key!r} is not taken by trafka's {cls.__name__}: {why}")
    for other in _find_components():
        if other is not cls and _norm(key) in _names(other):
            return ConfigError(
                f"{key!r} is a {other.__name__} setting; {cls.__name__} does not take it"
            )
    import difflib  # only a mistyped key needs it: not loaded with every client

    known = sorted(
        {_dotted(f) for f in dataclasses.fields(cls)} | {f.name for f in dataclasses.fields(cls)}
    )
    close = difflib.get_close_matches(key.strip(), known, n=1, cutoff=0.6)
    if not close:
        close = difflib.get_close_matches(_norm(key), known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return ConfigError(f"unknown configuration key {key!r} for {cls.__name__}{hint}")


def _no_components() -> tuple[type[ClientConfig], ...]:
    return ()


_find_components: Callable[[], tuple[type[ClientConfig], ...]] = _no_components


def components_are(find: Callable[[], tuple[type[ClientConfig], ...]]) -> None:
    """Tell the unknown-key error where every component's configuration class
    is, so that it names the one that takes a key given to another.

    The package (:mod:`trafka.sdk.config`) calls this when it loads: it knows
    every component, while this module, their base, knows none of them (the
    base importing its subclasses was an import circle, issue #65). ``find``
    loads the classes when first called: only a mistaken key needs them all.
    """
    global _find_components
    _find_components = find


def make_config(
    cls: type[_C], config: _C | Mapping[str, Any] | None, kwargs: Mapping[str, Any]
) -> _C:
    """Combine a config object or mapping with keyword overrides.

    Args:
        cls: the configuration class wanted.
        config: an instance of ``cls``, a mapping of keys, or ``None``.
        kwargs: keyword overrides (snake case, or dotted via ``**{"linger.ms": 1}``).

    Raises:
        ConfigError: unknown key, invalid value, or a config object of another class.
    """
    if config is None:
        return cls.from_dict(None, **kwargs)
    if isinstance(config, ClientConfig):
        if not isinstance(config, cls):
            raise ConfigError(f"expected a {cls.__name__}, got a {type(config).__name__}")
        return config.replace(**kwargs) if kwargs else config
    if isinstance(config, Mapping):
        return cls.from_dict(config, **_snake_keys(cls, kwargs))
    raise ConfigError(f"config must be a {cls.__name__} or a mapping, got {type(config).__name__}")
