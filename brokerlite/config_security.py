"""brokerlite's security settings: their checks, and how a broker reaches the others.

Rules (those of ``config.py`` about security):

* Security settings fail closed: a SASL protocol without users, an SSL protocol
  without a certificate, TLS or SASL material on a listener that would not use
  it, or a cluster member of a SASL listener without its own login is an error,
  never a silently open listener nor an anonymous replica.
* brokerlite has one listener, which brokers use to reach each other too: the
  inter-broker settings may only name it (``security.inter.broker.protocol``,
  ``inter.broker.listener.name``), and a JAAS line names it too.
* Each check normalises the values given in other shapes, then validates them;
  none puts a password in an error message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from trafka.common.x500 import PrincipalMapper

from .config_keys import (
    SECURITY_PROTOCOLS,
    ConfigError,
    JaasLogin,
    parse_names,
    parse_users,
)

__all__ = [
    "OPT_IN_MECHANISMS",
    "SASL_MECHANISMS",
    "SSL_CLIENT_AUTH",
    "SecuritySettings",
    "check_inter_broker",
    "check_security",
    "listener_names",
]


class SecuritySettings(Protocol):
    """What these checks read of a broker's configuration (a
    :class:`~trafka.brokerlite.config.BrokerConfig` is one). They normalise it in
    place, as the configuration's own checks do, before it is first used."""

    @property
    def security_protocol(self) -> str: ...

    @property
    def sasl_enabled_mechanisms(self) -> tuple[str, ...]: ...

    @property
    def sasl_users(self) -> tuple[tuple[str, str], ...]: ...

    @property
    def sasl_users_file(self) -> Path | None: ...

    @property
    def sasl_jaas_logins(self) -> tuple[JaasLogin, ...]: ...

    @property
    def sasl_oauthbearer_jwks_endpoint_url(self) -> str | None: ...

    @property
    def sasl_oauthbearer_jwks_endpoint_refresh_ms(self) -> int: ...

    @property
    def sasl_oauthbearer_clock_skew_seconds(self) -> int: ...

    @property
    def ssl_certfile(self) -> Path | None: ...

    @property
    def ssl_cafile(self) -> Path | None: ...

    @property
    def ssl_client_auth(self) -> str: ...

    @property
    def ssl_principal_mapping_rules(self) -> str: ...

    @property
    def ssl_endpoint_identification_algorithm(self) -> str: ...

    @property
    def security_inter_broker_protocol(self) -> str | None: ...

    @property
    def inter_broker_listener_name(self) -> str | None: ...

    @property
    def sasl_mechanism_inter_broker_protocol(self) -> str | None: ...

    @property
    def inter_broker_sasl_username(self) -> str | None: ...

    @property
    def inter_broker_sasl_password(self) -> str | None: ...

    @property
    def sasl_enabled(self) -> bool: ...

    @property
    def tls_enabled(self) -> bool: ...

    @property
    def cluster_mode(self) -> bool: ...


SSL_CLIENT_AUTH = ("none", "requested", "required")
# The SASL mechanisms brokerlite serves (trafka.codec.sasl implements them).
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# Served on request only: unsecured tokens authenticate whoever makes one.
OPT_IN_MECHANISMS = ("OAUTHBEARER",)


def check_security(cfg: SecuritySettings) -> None:
    """Normalise the security settings given in other shapes, then validate them."""
    protocol = str(cfg.security_protocol).strip().upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(
            f"security_protocol: {cfg.security_protocol!r} is not one of "
            f"{', '.join(SECURITY_PROTOCOLS)}"
        )
    object.__setattr__(cfg, "security_protocol", protocol)
    mechanisms = parse_names(cfg.sasl_enabled_mechanisms, "sasl_enabled_mechanisms")
    object.__setattr__(cfg, "sasl_enabled_mechanisms", mechanisms)
    for name in ("sasl_oauthbearer_expected_audience", "sasl_oauthbearer_required_scopes"):
        object.__setattr__(cfg, name, parse_names(getattr(cfg, name), name))
    if cfg.sasl_oauthbearer_clock_skew_seconds < 0:
        raise ConfigError("sasl_oauthbearer_clock_skew_seconds: must be >= 0")
    if cfg.sasl_oauthbearer_jwks_endpoint_refresh_ms <= 0:
        raise ConfigError("sasl_oauthbearer_jwks_endpoint_refresh_ms: must be > 0")
    if cfg.sasl_oauthbearer_jwks_endpoint_url is not None:
        from .security.jwks import check_jwks_url

        try:
            check_jwks_url(cfg.sasl_oauthbearer_jwks_endpoint_url)
        except ValueError as exc:
            raise ConfigError(f"sasl_oauthbearer_jwks_endpoint_url: {exc}") from None
        try:
            import cryptography  # noqa: F401 (signatures are checked with it)
        except ImportError:
            raise ConfigError(
                "sasl_oauthbearer_jwks_endpoint_url needs the cryptography package: "
                "pip install 'trafka[oauth]'"
            ) from None
    for name in ("sasl_oauthbearer_sub_claim_name", "sasl_oauthbearer_scope_claim_name"):
        if not str(getattr(cfg, name)).strip():
            raise ConfigError(f"{name}: must not be empty")
    object.__setattr__(cfg, "sasl_users", parse_users(cfg.sasl_users, "sasl_users"))
    for name in (
        "sasl_users_file",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_cafile",
        "client_telemetry_file",
    ):
        value = getattr(cfg, name)
        if value is not None and not isinstance(value, Path):
            object.__setattr__(cfg, name, Path(value))
    client_auth = str(cfg.ssl_client_auth).strip().lower()
    if client_auth not in SSL_CLIENT_AUTH:
        raise ConfigError(
            f"ssl_client_auth: {cfg.ssl_client_auth!r} is not one of {', '.join(SSL_CLIENT_AUTH)}"
        )
    object.__setattr__(cfg, "ssl_client_auth", client_auth)
    try:
        PrincipalMapper(cfg.ssl_principal_mapping_rules)
    except ValueError as exc:
        raise ConfigError(f"ssl_principal_mapping_rules: {exc}") from None
    if cfg.sasl_enabled:
        if not mechanisms:
            raise ConfigError("sasl_enabled_mechanisms: a SASL listener needs a mechanism")
        served = (*SASL_MECHANISMS, *OPT_IN_MECHANISMS)
        unknown = [m for m in mechanisms if m not in served]
        if unknown:
            raise ConfigError(
                f"sasl_enabled_mechanisms: {', '.join(unknown)} not supported; "
                f"brokerlite serves {', '.join(served)}"
            )
        needs_users = any(m in SASL_MECHANISMS for m in mechanisms)
        if needs_users and not cfg.sasl_users and cfg.sasl_users_file is None:
            raise ConfigError(
                f"security_protocol {protocol} needs users: set sasl_users or sasl_users_file"
            )
    elif cfg.sasl_users or cfg.sasl_users_file is not None:
        raise ConfigError(
            f"sasl_users/sasl_users_file are set but security_protocol is {protocol}, "
            "which does not authenticate: use SASL_PLAINTEXT or SASL_SSL"
        )
    if cfg.tls_enabled:
        if cfg.ssl_certfile is None:
            raise ConfigError(
                f"security_protocol {protocol} needs the broker's certificate and key: "
                "set ssl_certfile and ssl_keyfile (PEM)"
            )
        if client_auth != "none" and cfg.ssl_cafile is None:
            raise ConfigError(
                f"ssl_client_auth={client_auth} needs ssl_cafile, the authorities "
                "whose client certificates are accepted"
            )
    else:
        given = [
            name
            for name in ("ssl_certfile", "ssl_keyfile", "ssl_cafile", "ssl_key_password")
            if getattr(cfg, name) is not None
        ]
        if client_auth != "none":
            given.append("ssl_client_auth")
        if given:
            raise ConfigError(
                f"{', '.join(given)} set but security_protocol is {protocol}, which does "
                "not use TLS: use SSL or SASL_SSL"
            )


def listener_names(
    cfg: SecuritySettings, changes: dict[str, Any], listener: str | None, logins: list[JaasLogin]
) -> None:
    """Check the settings that name the listener (``inter.broker.listener.name``, the
    JAAS keys) against it, and add the JAAS lines to ``changes``. Without
    ``listeners`` among the same settings, the listener's name is its protocol's."""
    name = listener or str(changes.get("security_protocol", cfg.security_protocol)).strip().upper()
    given = changes.get("inter_broker_listener_name")
    if given is not None and str(given).strip().upper() != name:
        raise ConfigError(
            f"inter.broker.listener.name: {given!r} is not brokerlite's listener ({name}); "
            "brokers reach each other on the one listener"
        )
    if not logins:
        return
    users = list(parse_users(changes.get("sasl_users", cfg.sasl_users), "sasl_users"))
    for login in logins:
        if login.listener != name:
            raise ConfigError(
                f"listener.name.{login.listener.lower()}...sasl.jaas.config names another "
                f"listener than brokerlite's ({name})"
            )
        users += login.users
    changes["sasl_users"] = tuple(users)
    changes["sasl_jaas_logins"] = (*cfg.sasl_jaas_logins, *logins)


def check_inter_broker(cfg: SecuritySettings) -> None:
    """How this broker reaches the others: on its one listener, logged in with its
    own credentials when the listener takes SASL (fail closed: a cluster member of a
    SASL listener without them is an error, never an anonymous replica)."""
    protocol = cfg.security_protocol
    inter = cfg.security_inter_broker_protocol
    if inter is not None:
        inter = str(inter).strip().upper()
        if cfg.inter_broker_listener_name is not None:
            raise ConfigError(
                "only one of inter.broker.listener.name and security.inter.broker.protocol "
                "may be set"
            )
        if inter != protocol:
            raise ConfigError(
                f"security.inter.broker.protocol {inter} is not the listener's protocol "
                f"({protocol}): brokerlite has one listener, which brokers use to reach "
                "each other too"
            )
        object.__setattr__(cfg, "security_inter_broker_protocol", inter)
    algorithm = str(cfg.ssl_endpoint_identification_algorithm).strip().lower()
    if algorithm not in ("https", ""):
        raise ConfigError(
            f"ssl_endpoint_identification_algorithm: {algorithm!r} is not 'https' or empty"
        )
    object.__setattr__(cfg, "ssl_endpoint_identification_algorithm", algorithm)
    own = ("sasl_mechanism_inter_broker_protocol", "inter_broker_sasl_username")
    if not cfg.sasl_enabled:
        given = [n for n in own if getattr(cfg, n) is not None]
        if cfg.inter_broker_sasl_password is not None:
            given.append("inter_broker_sasl_password")
        if given or cfg.sasl_jaas_logins:
            raise ConfigError(
                f"{', '.join(given) or 'a sasl.jaas.config'} set but security_protocol is "
                f"{protocol}, which does not authenticate: use SASL_PLAINTEXT or SASL_SSL"
            )
        return
    mechanism = cfg.sasl_mechanism_inter_broker_protocol
    if mechanism is None:
        served = [m for m in cfg.sasl_enabled_mechanisms if m in SASL_MECHANISMS]
        mechanism = next(iter(served or cfg.sasl_enabled_mechanisms), None)
    else:
        mechanism = str(mechanism).strip().upper()
        if mechanism not in cfg.sasl_enabled_mechanisms:
            raise ConfigError(
                f"sasl.mechanism.inter.broker.protocol {mechanism} must be one of "
                f"sasl_enabled_mechanisms ({', '.join(cfg.sasl_enabled_mechanisms)})"
            )
    object.__setattr__(cfg, "sasl_mechanism_inter_broker_protocol", mechanism)
    if not cfg.cluster_mode:
        return
    if mechanism == "OAUTHBEARER":
        _check_oauthbearer_login(cfg, protocol)
        return
    if mechanism not in SASL_MECHANISMS:
        raise ConfigError(
            "sasl.mechanism.inter.broker.protocol: brokers log in to each other with "
            f"{', '.join((*SASL_MECHANISMS, *OPT_IN_MECHANISMS))}; enable one of them"
        )
    user, password = cfg.inter_broker_sasl_username, cfg.inter_broker_sasl_password
    for login in cfg.sasl_jaas_logins:
        if login.mechanism == mechanism and login.username is not None:
            user = login.username if user is None else user
            password = login.password if password is None else password
    if user is None or password is None:
        raise ConfigError(
            f"a cluster member on a {protocol} listener logs in to the other brokers with "
            f"{mechanism}: set inter_broker_sasl_username and inter_broker_sasl_password, or "
            f"listener.name.{protocol.lower()}.{mechanism.lower()}.sasl.jaas.config"
        )
    object.__setattr__(cfg, "inter_broker_sasl_username", user)
    object.__setattr__(cfg, "inter_broker_sasl_password", password)


def _check_oauthbearer_login(cfg: SecuritySettings, protocol: str) -> None:
    """Brokers log in to each other with OAUTHBEARER: with the token Kafka's unsecured
    login module makes from the listener's JAAS line, which the other brokers accept
    only when they validate unsecured tokens (no JWKS endpoint): fail closed."""
    key = f"listener.name.{protocol.lower()}.oauthbearer.sasl.jaas.config"
    if cfg.inter_broker_sasl_password is not None:
        raise ConfigError(
            "inter_broker_sasl_password: an OAUTHBEARER broker logs in with a token; "
            f"set {key} (unsecuredLoginStringClaim_sub=...)"
        )
    login = next((j for j in cfg.sasl_jaas_logins if j.mechanism == "OAUTHBEARER"), None)
    if login is None:
        raise ConfigError(
            f"a cluster member on a {protocol} listener logs in to the other brokers with "
            f"OAUTHBEARER: set {key} (Kafka's OAuthBearerLoginModule with "
            'unsecuredLoginStringClaim_sub="<the broker\'s principal>")'
        )
    if cfg.sasl_oauthbearer_jwks_endpoint_url is not None:
        raise ConfigError(
            "sasl.mechanism.inter.broker.protocol OAUTHBEARER: brokerlite's brokers log in "
            "with unsecured tokens, which a broker validating signed tokens "
            "(sasl_oauthbearer_jwks_endpoint_url) refuses; use SCRAM or PLAIN between brokers"
        )
    given = cfg.inter_broker_sasl_username
    if given is not None and given != login.username:
        raise ConfigError(
            f"inter_broker_sasl_username {given!r} is not the principal of {key} "
            f"({login.username!r})"
        )
    object.__setattr__(cfg, "inter_broker_sasl_username", login.username)
