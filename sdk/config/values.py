"""One setting's value: the coercions that turn what a user or a properties file
gives (``"5"``, ``"true"``, ``"a:1,b:2"``) into the setting's type, and refuse
the rest.

Rules:

* Each coercion takes ``(dotted name, value)`` and returns the canonical value,
  or raises :class:`~trafka.sdk.errors.ConfigError` naming the key.
* Every number fits Java's type for the setting (a long unless said: int32
  where Java's is an int or the value goes on the wire as one).
* :func:`_field` declares a setting of :mod:`.config`'s classes: its default,
  its coercion, its dotted name when it is not the mechanical one, other
  clients' names for it and whether it stays out of ``repr``.
* Every coercion carries a :class:`ValueSpec` (:func:`value_spec` reads it):
  what it takes, in words a reader and a program can both use, so that the
  configuration reference (``trafka.tools.config_reference``) says what the
  code checks, from the code.
"""

from __future__ import annotations

import dataclasses
import re
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from trafka.common.jaas import jaas_options

from .._validate import INT16_MAX, INT64_MAX
from ..errors import ConfigError

_F = TypeVar("_F", bound=Callable[..., Any])


class ValueSpec:
    """What a coercion takes: the type of the value it returns, its bounds or
    choices, and whether ``None`` (unset) is accepted. Read-only by convention.

    A plain class rather than a dataclass: this module is imported with
    ``trafka.sdk``, and a dataclass costs a millisecond or two to build at
    import (issue #48).

    Attributes:
        type: the kind of value, in words (``integer``, ``boolean``,
            ``string``, ``list of strings``, ``callable``...).
        minimum / maximum: an integer's bounds (``None``: unbounded).
        choices: the values taken, in their canonical spelling.
        also: other spellings taken for the choices (``all`` for ``-1``...).
        optional: ``None`` is taken (and means "unset").
        unit: what a number counts (``bytes``) when its name does not say.
        note: what the fields above cannot say (a format, a rule).
    """

    __slots__ = ("also", "choices", "maximum", "minimum", "note", "optional", "type", "unit")

    def __init__(
        self,
        type: str,
        minimum: int | None = None,
        maximum: int | None = None,
        *,
        choices: tuple[str, ...] = (),
        also: tuple[str, ...] = (),
        optional: bool = False,
        unit: str = "",
        note: str = "",
    ) -> None:
        self.type = type
        self.minimum = minimum
        self.maximum = maximum
        self.choices = choices
        self.also = also
        self.optional = optional
        self.unit = unit
        self.note = note

    def __repr__(self) -> str:
        return f"ValueSpec({', '.join(f'{k}={getattr(self, k)!r}' for k in self.__slots__)})"


def _described(spec: ValueSpec) -> Callable[[_F], _F]:
    """Attach ``spec`` to a coercion (read back with :func:`value_spec`)."""

    def attach(coerce: _F) -> _F:
        coerce.value_spec = spec  # type: ignore[attr-defined]
        return coerce

    return attach


def value_spec(coerce: Callable[[str, Any], Any]) -> ValueSpec:
    """The :class:`ValueSpec` of a setting's coercion.

    Raises:
        TypeError: the coercion carries none (every one in this module does).
    """
    spec = getattr(coerce, "value_spec", None)
    if not isinstance(spec, ValueSpec):
        raise TypeError(f"the coercion {coerce!r} carries no ValueSpec")
    return spec


def _int(
    minimum: int | None = 0, maximum: int | None = None, *, unit: str = "", note: str = ""
) -> Callable[[str, Any], int]:
    # Every setting fits Java's type for it (a long unless said: int32 where
    # Java's is an int or the value goes on the wire as one).
    if maximum is None:
        maximum = INT64_MAX

    def coerce(name: str, value: Any) -> int:
        if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{name} must be an integer, got {value!r}")
        if minimum is not None and value < minimum:
            raise ConfigError(f"{name} must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise ConfigError(f"{name} must be <= {maximum}, got {value}")
        return value

    return _described(ValueSpec("integer", minimum, maximum, unit=unit, note=note))(coerce)


def _opt_int(
    minimum: int | None = 0, maximum: int | None = None, *, note: str = ""
) -> Callable[[str, Any], int | None]:
    """:func:`_int`, or ``None`` for unset."""
    check = _int(minimum, maximum, note=note)

    def coerce(name: str, value: Any) -> int | None:
        return None if value is None else check(name, value)

    bounds = value_spec(check)
    spec = ValueSpec("integer", bounds.minimum, bounds.maximum, optional=True, note=note)
    return _described(spec)(coerce)


@_described(ValueSpec("boolean", choices=("true", "false")))
def _bool(name: str, value: Any) -> bool:
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be a boolean, got {value!r}")
    return value


@_described(ValueSpec("boolean", choices=("true", "false"), optional=True))
def _opt_bool(name: str, value: Any) -> bool | None:
    return None if value is None else _bool(name, value)


@_described(ValueSpec("string", note="any string of at most 32767 bytes in UTF-8"))
def _str(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{name} must be a string, got {value!r}")
    # Strings may go into every request (client.id in each header): one that
    # cannot be encoded as a protocol string would fail them all, later.
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ConfigError(f"{name} is not valid Unicode (a lone surrogate?)") from None
    if size > INT16_MAX:
        raise ConfigError(f"{name} must be at most {INT16_MAX} bytes in UTF-8, got {size}")
    return value


@_described(ValueSpec("string", optional=True, note="host:port"))
def _listen(name: str, value: Any) -> str | None:
    if value is None:
        return None
    text = str(value)
    _, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"{name} must be host:port, not {text!r}")
    return text


@_described(ValueSpec("string", optional=True, note="any string (empty counts as unset)"))
def _opt_str(name: str, value: Any) -> str | None:
    if value is None:
        return None
    value = _str(name, value)
    return value or None


def _choice(*choices: str) -> Callable[[str, Any], str]:
    def coerce(name: str, value: Any) -> str:
        if not isinstance(value, str) or value.strip().lower() not in choices:
            raise ConfigError(f"{name} must be one of {', '.join(choices)}; got {value!r}")
        return value.strip().lower()

    return _described(ValueSpec("string", choices=choices, note="any case"))(coerce)


@_described(ValueSpec("list of strings", note="a list, or a comma-separated string"))
def _str_list(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",")]
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        raise ConfigError(f"{name} must be a list or a comma-separated string, got {value!r}")
    for item in items:
        if not isinstance(item, str) or not item:
            raise ConfigError(f"{name} must hold non-empty strings, got {item!r}")
    if not items:
        raise ConfigError(f"{name} must not be empty")
    return tuple(items)


@_described(
    ValueSpec(
        "list of strings",
        note="host:port, [v6-address]:port, a host alone (port 9092) or a zeroconf spec; "
        "a list or a comma-separated string",
    )
)
def _servers(name: str, value: Any) -> tuple[str, ...]:
    # trafka.discovery is loaded by the first client made, not by every import of the SDK.
    from trafka.discovery import is_spec, parse_spec

    servers = _str_list(name, value)
    for server in servers:
        if is_spec(server):
            try:
                parse_spec(server)
            except ValueError as exc:
                raise ConfigError(f"{name}: {exc}") from None
        else:
            _split_host_port(name, server)
    return servers


DEFAULT_PORT = 9092  # what Kafka's clients assume when a server names no port


def _split_host_port(name: str, server: str) -> tuple[str, int]:
    """``host:port``, ``[v6]:port``, or a host alone (``localhost``, ``[::1]``) on
    port 9092, as librdkafka and kafka-python read ``bootstrap.servers``."""
    bracketed = server.startswith("[") and server.endswith("]")
    if bracketed or ":" not in server:
        host = server.strip("[]")
        if host and not any(c.isspace() for c in host):
            return host, DEFAULT_PORT
    host, sep, port = server.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{name}: {server!r} is not host:port (or a host alone, port 9092)")
    return host.strip("[]"), int(port)


#: librdkafka's names for the auto.offset.reset policies (its ``error`` raises
#: when there is no valid offset, as Java's ``none`` does).
_OFFSET_RESET = {
    "earliest": "earliest",
    "smallest": "earliest",
    "beginning": "earliest",
    "latest": "latest",
    "largest": "latest",
    "end": "latest",
    "none": "none",
    "error": "none",
}


@_described(
    ValueSpec(
        "string",
        choices=("latest", "earliest", "none"),
        also=tuple(k for k in _OFFSET_RESET if k not in ("earliest", "latest", "none")),
    )
)
def _offset_reset(name: str, value: Any) -> str:
    if isinstance(value, str) and value.strip().lower() in _OFFSET_RESET:
        return _OFFSET_RESET[value.strip().lower()]
    raise ConfigError(
        f"{name} must be one of latest, earliest, none "
        f"(or librdkafka's {', '.join(k for k in _OFFSET_RESET if k not in ('earliest', 'latest', 'none'))}); "
        f"got {value!r}"
    )


@_described(ValueSpec("integer", choices=("-1", "0", "1"), also=("all",)))
def _acks(name: str, value: Any) -> int:
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "all":
            return -1
        if re.fullmatch(r"-?\d+", text):
            value = int(text)
    if isinstance(value, int) and not isinstance(value, bool) and value in (-1, 0, 1):
        return value
    raise ConfigError(f"{name} must be one of all, -1, 0, 1; got {value!r}")


_COMPRESSION = ("none", "gzip", "snappy", "lz4", "zstd")
# Kafka's bounds of compression.level per codec (GzipCompression, Lz4Compression,
# ZstdCompression); snappy has no levels.
_COMPRESSION_LEVELS = {"gzip": (1, 9), "lz4": (1, 17), "zstd": (-131072, 22)}
_SECURITY_PROTOCOLS = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")
_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


@_described(ValueSpec("string", choices=_SASL_MECHANISMS, note="any case"))
def _sasl_mechanism(name: str, value: Any) -> str:
    if isinstance(value, str) and value.strip().upper() in _SASL_MECHANISMS:
        return value.strip().upper()
    if isinstance(value, str) and value.strip().upper() == "GSSAPI":
        raise ConfigError(f"{name}: {value.strip().upper()} is not supported by trafka")
    raise ConfigError(f"{name} must be one of {', '.join(_SASL_MECHANISMS)}; got {value!r}")


@_described(
    ValueSpec("callable", optional=True, note="a callable or an object with token(), sync or async")
)
def _token_provider(name: str, value: Any) -> Any:
    if value is None or callable(value) or callable(getattr(value, "token", None)):
        return value
    raise ConfigError(
        f"{name} must be a callable or an object with a token() method, got {value!r}"
    )


#: librdkafka's ``debug`` contexts (CONFIGURATION.md), each with the trafka
#: loggers whose lines it turns on (the connection's, the metadata's and the
#: protocol's lines are all logger ``trafka.sdk``'s).
DEBUG_CONTEXTS = {
    "all": ("trafka",),
    "generic": ("trafka.sdk",),
    "broker": ("trafka.sdk",),
    "topic": ("trafka.sdk",),
    "metadata": ("trafka.sdk",),
    "feature": ("trafka.sdk",),
    "protocol": ("trafka.sdk",),
    "security": ("trafka.sdk",),
    "conf": ("trafka.sdk",),
    "mock": ("trafka.sdk",),
    "admin": ("trafka.sdk",),
    "queue": ("trafka.sdk.producer", "trafka.sdk.blocking"),
    "msg": ("trafka.sdk.producer", "trafka.sdk.blocking"),
    "producer": ("trafka.sdk.producer", "trafka.sdk.blocking"),
    "eos": ("trafka.sdk.producer",),
    "cgrp": ("trafka.sdk.group", "trafka.sdk.consumer"),
    "consumer": ("trafka.sdk.consumer", "trafka.sdk.group", "trafka.sdk.blocking"),
    "fetch": ("trafka.sdk.consumer", "trafka.sdk.fetch_sessions"),
    "assignor": ("trafka.sdk.group",),
    "interceptor": ("trafka.sdk.interceptors",),
    "plugin": ("trafka.sdk.interceptors",),
    "telemetry": ("trafka.sdk.telemetry",),
}


@_described(
    ValueSpec(
        "list of strings",
        choices=tuple(DEBUG_CONTEXTS),
        note="librdkafka's debug contexts, comma-separated (empty: none)",
    )
)
def _debug(name: str, value: Any) -> tuple[str, ...]:
    if value == () or (isinstance(value, str) and not value.strip()):
        return ()
    contexts = tuple(c.strip().lower() for c in _str_list(name, value))
    wrong = [c for c in contexts if c not in DEBUG_CONTEXTS]
    if wrong:
        raise ConfigError(
            f"{name}: unknown debug context(s) {', '.join(wrong)}; known: {', '.join(DEBUG_CONTEXTS)}"
        )
    return contexts


@_described(ValueSpec("logging.Logger", optional=True, note="or any object with log(level, msg)"))
def _logger(name: str, value: Any) -> Any:
    if value is None or callable(getattr(value, "log", None)):
        return value
    raise ConfigError(f"{name} must be a logging.Logger (an object with log()), got {value!r}")


@_described(ValueSpec("callable", optional=True))
def _opt_callable(name: str, value: Any) -> Any:
    if value is None or callable(value):
        return value
    raise ConfigError(f"{name} must be a callable, got {value!r}")


# The settings each token provider this module made was made from (so that a
# config copied with other settings makes a new one): weakly, as a provider
# lives as long as the configs that hold it.
_PROVIDER_SETTINGS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_NOT_MADE_HERE = object()


def _made_from(provider: Any) -> Any:
    """The settings ``provider`` was made from here, or ``_NOT_MADE_HERE``
    (the caller's own provider)."""
    try:
        return _PROVIDER_SETTINGS.get(provider, _NOT_MADE_HERE)
    except TypeError:  # not weakly referenceable: not one of ours
        return _NOT_MADE_HERE


@_described(ValueSpec("boolean", choices=("true", "false"), also=("https", "none", "")))
def _check_hostname(name: str, value: Any) -> bool:
    # Java's ssl.endpoint.identification.algorithm: "https" checks, "" does not.
    if isinstance(value, str) and value.strip().lower() in ("https", "none", ""):
        return value.strip().lower() == "https"
    return _bool(name, value)


@_described(ValueSpec("ssl.SSLContext", optional=True))
def _ssl_context(name: str, value: Any) -> Any:
    import ssl

    if value is not None and not isinstance(value, ssl.SSLContext):
        raise ConfigError(f"{name} must be an ssl.SSLContext, got {value!r}")
    return value


def _parse_jaas(text: str) -> dict[str, str]:
    """The ``key="value"`` options of a JAAS login module line (Java's sasl.jaas.config)."""
    return jaas_options(text)


def _callable_or_name(*names: str) -> Callable[[str, Any], Any]:
    def coerce(name: str, value: Any) -> Any:
        if callable(value):
            return value
        if isinstance(value, str) and value.strip().lower() in names:
            return value.strip().lower()
        raise ConfigError(f"{name} must be a callable or one of {', '.join(names)}; got {value!r}")

    return _described(ValueSpec("string or callable", choices=names, note="or a callable"))(coerce)


_SERDES = ("bytes", "str", "json")

# Java class names accepted for partition.assignment.strategy, mapped to ours.
_ASSIGNOR_ALIASES = {
    "range": "range",
    "roundrobin": "roundrobin",
    "sticky": "sticky",
    "cooperative-sticky": "cooperative-sticky",
    "org.apache.kafka.clients.consumer.rangeassignor": "range",
    "org.apache.kafka.clients.consumer.roundrobinassignor": "roundrobin",
    "org.apache.kafka.clients.consumer.stickyassignor": "sticky",
    "org.apache.kafka.clients.consumer.cooperativestickyassignor": "cooperative-sticky",
}


@_described(
    ValueSpec(
        "list of strings",
        choices=("range", "roundrobin", "sticky", "cooperative-sticky"),
        note="in preference order; Java's class names are taken too",
    )
)
def _assignors(name: str, value: Any) -> tuple[str, ...]:
    items = _str_list(name, value)
    out = []
    for item in items:
        canon = _ASSIGNOR_ALIASES.get(item.strip().lower())
        if canon is None:
            raise ConfigError(
                f"{name}: unknown assignor {item!r}; known: range, roundrobin, sticky, cooperative-sticky"
            )
        out.append(canon)
    return tuple(out)


def _field(
    default: Any,
    coerce: Callable[[str, Any], Any],
    *,
    dotted: str | None = None,
    aliases: tuple[str, ...] = (),
    secret: bool = False,
) -> Any:
    """A setting: its default, its coercion, its dotted name when that is not the
    mechanical one, other clients' names for it (``aliases``), and whether its
    value must stay out of ``repr`` (``secret``)."""
    return dataclasses.field(
        default=default,
        repr=not secret,
        metadata={"coerce": coerce, "dotted": dotted, "aliases": aliases},
    )


def _dotted(f: dataclasses.Field[Any]) -> str:
    return f.metadata.get("dotted") or f.name.replace("_", ".")


def dotted_name(f: dataclasses.Field[Any]) -> str:
    """A setting's Kafka name (``linger.ms``), from its field."""
    return _dotted(f)
