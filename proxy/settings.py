"""``trafka proxy``'s settings as one table (:data:`SETTINGS`): the command's
flags, its TOML file (``--config``), its environment variables,
``--check-config`` and the reference in docs/proxy.md all come from it.

Rules:

* One name per setting. The snake_case name is the file's key; the flag is
  ``--`` and the name with dashes (``node_port_base``: ``--node-port-base``);
  the variable is ``TRAFKA_PROXY_`` and the name in capitals
  (``TRAFKA_PROXY_NODE_PORT_BASE``).
* Precedence: a flag given on the command line, then its environment
  variable, then the file, then the default.
* Every source is typed as the flags are: a variable's text is parsed (an
  integer, a boolean as ``true``/``false``/``1``/``0``/``yes``/``no``/``on``/
  ``off``, a list comma-separated); a file's value must already have the type
  (TOML ``"5"`` is not a number), a list as a TOML array or one
  comma-separated string.
* Every problem is found before any is reported: unknown keys and
  ``TRAFKA_PROXY_*`` variables (with the nearest known name), bad types,
  values out of range, files that do not exist, settings that contradict
  each other. They are raised together as one :class:`~trafka.sdk.ConfigError`
  (the SDK's, whose ``problems`` lists them), each naming where the value came
  from (the flag, the variable, or the file and key).
* The settings marked ``reload`` can change on SIGHUP without a restart (see
  :mod:`.service`); a change to any other is refused.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trafka.sdk import ConfigError

from .config import JOURNAL_TOPIC as TOPIC
from .config import ProxyConfig
from .keyrouting.plan import HASHES
from .listeners import listener_of_text, listeners_of_table, problems_of

__all__ = [
    "DEFAULT_STRIDE",
    "ENV_PREFIX",
    "LOG_LEVELS",
    "SETTINGS",
    "FilterSpec",
    "Setting",
    "Sources",
    "gather",
    "proxy_config",
    "reference_table",
    "resolve",
]

ENV_PREFIX = "TRAFKA_PROXY_"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
# Worker k serves broker n on node_port_base + k * stride + n (see .workers).
DEFAULT_STRIDE = 100
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting. ``kind``: str, int, bool, list, path (a file that must
    exist), choice (one of ``choices``), filters (see :class:`FilterSpec`),
    listeners (:mod:`.listeners`: tables in the file, ``NAME=HOST:PORT``
    elsewhere)."""

    name: str
    kind: str
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    reload: bool = False
    short: str = ""

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()


@dataclass(frozen=True, slots=True)
class FilterSpec:
    """A filter of the chain: ``use`` (``module:attribute``) and the settings
    handed to its :meth:`~.filters.Filter.configure` (from the file only)."""

    use: str
    settings: Mapping[str, Any] = field(default_factory=dict)


SETTINGS: tuple[Setting, ...] = (
    Setting("upstream", "list", None, "The Kafka cluster's bootstrap servers, host:port[,...], "
            "or a zeroconf spec (zeroconf, zeroconf:cluster=ID). Required."),
    Setting("listen", "str", "127.0.0.1:9092", "host:port of the bootstrap listener "
            "(port 0: any free port)."),
    Setting("advertised_host", "str", None, "Host name clients are told to use "
            "(default: listen's host; required when listen is a wildcard)."),
    Setting("node_port_base", "int", None, "Serve broker N on this port + N. Default: "
            "listen's port + 1 (free ports when listen's port is 0); -1: a free port "
            "per broker.", minimum=-1),
    Setting("workers", "int", 1, "Proxy processes sharing the bootstrap port "
            "(SO_REUSEPORT, Linux), each serving the brokers on ports of its own.", minimum=1),
    Setting("node_port_stride", "int", DEFAULT_STRIDE, "With workers: worker K serves "
            "broker N on node_port_base + K * this + N.", minimum=1),
    Setting("route_keys", "choice", "murmur2", "The key hash that places keyed records "
            "(murmur2 as Java; none: leave them).", choices=("none", *HASHES)),
    Setting("max_frame_size", "int", 100 * 1024 * 1024, "The largest frame accepted from "
            "a client or a broker (Kafka's socket.request.max.bytes).", minimum=1),
    Setting("ssl_certfile", "path", None, "Serve clients over TLS with this certificate "
            "(PEM); reloaded on SIGHUP for new connections.", reload=True),
    Setting("ssl_keyfile", "path", None, "The certificate's private key (PEM), if not in "
            "the certfile; reloaded on SIGHUP.", reload=True),
    Setting("ssl_cafile", "path", None, "CAs of the clients' certificates (PEM), for "
            "ssl_client_auth; reloaded on SIGHUP.", reload=True),
    Setting("ssl_client_auth", "choice", "none", "Client certificates: required, requested "
            "or none (Kafka's ssl.client.auth); reloaded on SIGHUP.",
            choices=("required", "requested", "none"), reload=True),
    Setting("ssl_principal_mapping_rules", "str", "DEFAULT", "A client certificate's subject "
            "to its principal: RULE:pattern/replacement/[LU],...,DEFAULT (KIP-371); "
            "reloaded on SIGHUP.", reload=True),
    Setting("sni_domain", "str", None, "One TLS port for the cluster: clients name broker N "
            "broker-N.<this> (bootstrap: bootstrap.<this>) by SNI; another domain is taken on "
            "SIGHUP for new connections (SNI is not switched on or off).", reload=True),
    Setting("sni_port", "int", None, "With sni_domain: the port answers give the broker "
            "names (default: listen's).", minimum=1),
    Setting("sni_virtual_hosts", "bool", False, "With sni_domain: clients may name "
            "broker-N.<label>.<sni_domain> (bootstrap.<label>...), a virtual host that answers "
            "on the connection keep and filters read (the tenants filter's hosts)."),
    Setting("listeners", "listeners", (), "Named listeners, a bootstrap port each with "
            "broker ports of its own (the tenants filter's listeners): in the file "
            "[[listeners]] tables {name, listen, node_port_base, advertised_host}; as a flag "
            "or variable NAME=HOST:PORT[,...], node ports from its port + 1."),
    Setting("upstream_ssl", "bool", False, "Connect to the brokers over TLS."),
    Setting("upstream_ssl_cafile", "path", None, "CAs of the brokers' certificates (PEM)."),
    Setting("upstream_ssl_certfile", "path", None, "The certificate (PEM) the proxy shows "
            "brokers that ask for one (mutual TLS)."),
    Setting("upstream_ssl_keyfile", "path", None, "Its private key (PEM), if not in the certfile."),
    Setting("announce", "bool", False, "Announce the proxy on the local network "
            "(zeroconf, _kafka._tcp, role proxy)."),
    Setting("metrics_listen", "str", None, "host:port serving Prometheus metrics "
            "(/metrics), /healthz and /readyz over HTTP."),
    Setting("max_decompressed_bytes", "int", 16 * 1024 * 1024, "The most one batch may "
            "inflate to when routed (beyond: MESSAGE_TOO_LARGE).", minimum=1),
    Setting("journal", "str", None, "Where idempotent producers' placements are recorded "
            f"(exactly once across restarts): a directory, or topic[:NAME] ({TOPIC})."),
    Setting("journal_takeover_grace_ms", "int", 5000, "How long a proxy taking over a "
            "producer, or just started, waits before asking the leaders for its "
            "sequences.", minimum=0),
    Setting("origin_headers", "bool", False, "Give each record of a batch the proxy "
            "splits a trafka-origin header saying where the client put it."),
    Setting("coalesce", "bool", True, "Plain producers' routed requests to one broker "
            "share upstream requests (with the codec's C accelerator built)."),
    Setting("queued_max_request_bytes", "int", 104_857_600, "The most bytes of requests "
            "held across all client connections (queued.max.request.bytes); -1: no bound.",
            minimum=-1),
    Setting("connections_max_idle_ms", "int", 600_000, "Close a client connection idle "
            "this long (connections.max.idle.ms); -1: never.", minimum=-1),
    Setting("request_receive_timeout_ms", "int", 30_000, "Close a client connection whose "
            "request has not arrived whole this long after its first bytes; -1: never.",
            minimum=-1),
    Setting("filter", "filters", (), "A trafka.proxy.Filter (module:attribute) to run, in "
            "the order given; in the file, also a table {use, settings}, whose settings "
            "are reloaded on SIGHUP (the chain itself is not).", reload=True),
    Setting("principal_credentials", "path", None, "A JSON file of the upstream logins "
            "the proxy holds per SASL principal."),
    Setting("sasl_without_credentials", "choice", "forward", "A SASL client whose "
            "principal has no login held: forward its records unrouted, or refuse it.",
            choices=("forward", "refuse")),
    Setting("sasl_oauthbearer_sub_claim_name", "str", "sub", "The OAuth token claim the "
            "brokers take a client's principal from."),
    Setting("log_level", "choice", "INFO", "The proxy's log level; reloaded on SIGHUP.",
            choices=LOG_LEVELS, reload=True),
    Setting("verbose", "bool", False, "Log at DEBUG whatever log_level says (each broker "
            "listener and connection); reloaded on SIGHUP.", reload=True, short="-v"),
)  # fmt: skip

BY_NAME = {s.name: s for s in SETTINGS}
# A flag's value when the command line does not give it.
NOT_GIVEN: Any = None


@dataclass(frozen=True, slots=True)
class Sources:
    """Where the settings come from: the flags given (name -> value, typed by
    the command line), the environment, and a TOML file's path. Kept by a
    running proxy, which reads the file and environment again on SIGHUP."""

    flags: Mapping[str, Any] = field(default_factory=dict)
    environ: Mapping[str, str] = field(default_factory=dict)
    path: str | None = None


def resolve(sources: Sources) -> tuple[dict[str, Any], dict[str, str]]:
    """Every setting's value (flag, else variable, else file, else default) and
    where it came from (for messages).

    Raises:
        ConfigError: every problem found (see the module's rules).
    """
    values, origin, problems = gather(sources)
    if problems:
        raise ConfigError.of(problems)
    return values, origin


def gather(sources: Sources) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """As :func:`resolve`, the problems returned rather than raised: the values
    are the sources' where they could be read, so that what else can be
    checked is (the filters' settings, say) and reported with them."""
    problems: list[str] = []
    layers: list[dict[str, tuple[Any, str]]] = []  # lowest precedence first
    from_file = {} if sources.path is None else _from_file(sources.path, problems)
    # A file that cannot be read: its settings' absence is not reported as well.
    unreadable = from_file is None
    layers.append(from_file or {})
    layers.append(_from_environ(sources.environ, problems))
    given = {k: v for k, v in sources.flags.items() if v is not NOT_GIVEN and v != ()}
    layers.append({k: (v, BY_NAME[k].flag) for k, v in given.items()})
    values = {s.name: s.default for s in SETTINGS}
    origin = {s.name: s.name for s in SETTINGS}
    for layer in layers:
        for name, (value, where) in layer.items():
            values[name], origin[name] = value, where
    values["listeners"] = _listeners(values["listeners"], origin["listeners"], problems)
    for s in SETTINGS:
        if values[s.name] is not None:
            _check_range(s, values[s.name], origin[s.name], problems)
    if not unreadable:
        problems += _conflicts(values, origin)
    return values, origin, problems


def _from_file(path: str, problems: list[str]) -> dict[str, tuple[Any, str]] | None:
    """The file's settings (None: it cannot be read)."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        problems.append(f"cannot read the configuration file {path}: {exc.strerror or exc}")
        return None
    except tomllib.TOMLDecodeError as exc:
        problems.append(f"{path} is not TOML: {exc}")
        return None
    out: dict[str, tuple[Any, str]] = {}
    for key, raw in data.items():
        where = f"{path}: {key}"
        setting = BY_NAME.get(key)
        if setting is None:
            problems.append(f"{where}: unknown setting{_nearest(key, list(BY_NAME))}")
            continue
        value = _typed_from_file(setting, raw, where, problems)
        if value is not None:
            out[key] = (value, where)
    return out


def _typed_from_file(s: Setting, raw: Any, where: str, problems: list[str]) -> Any:
    kind = s.kind
    if kind == "filters":
        return _filters_from_file(raw, where, problems)
    if kind == "listeners":
        return listeners_of_table(raw, where, problems)
    if kind == "list" and isinstance(raw, str):
        raw = _split(raw)
    ok = {
        "int": isinstance(raw, int) and not isinstance(raw, bool),
        "bool": isinstance(raw, bool),
        "list": isinstance(raw, list) and bool(raw) and all(isinstance(x, str) for x in raw),
    }.get(kind, isinstance(raw, str))
    if not ok:
        problems.append(f"{where}: {_describe(raw)} is not {_KIND_NAMES[kind]}")
        return None
    return tuple(raw) if kind == "list" else raw


def _filters_from_file(raw: Any, where: str, problems: list[str]) -> tuple[FilterSpec, ...] | None:
    entries = raw if isinstance(raw, list) else [raw]
    specs: list[FilterSpec] = []
    for entry in entries:
        if isinstance(entry, str):
            specs.append(FilterSpec(entry))
            continue
        if isinstance(entry, dict) and isinstance(entry.get("use"), str):
            extra = set(entry) - {"use", "settings"}
            settings = entry.get("settings", {})
            if extra:
                problems.append(f"{where}: unknown key {sorted(extra)[0]!r} (use, settings)")
            elif not isinstance(settings, dict):
                problems.append(f"{where}: the settings of {entry['use']} are not a table")
            else:
                specs.append(FilterSpec(entry["use"], settings))
            continue
        problems.append(
            f"{where}: {_describe(entry)} is not module:attribute nor {{use, settings}}"
        )
        return None
    return tuple(specs)


def _from_environ(environ: Mapping[str, str], problems: list[str]) -> dict[str, tuple[Any, str]]:
    out: dict[str, tuple[Any, str]] = {}
    names = {s.env: s for s in SETTINGS}
    for var, text in environ.items():
        if not var.startswith(ENV_PREFIX) or var == ENV_PREFIX + "CONFIG":
            continue
        setting = names.get(var)
        if setting is None:
            problems.append(f"{var}: unknown setting{_nearest(var, list(names))}")
            continue
        try:
            out[setting.name] = (_parse_text(setting, text), var)
        except ValueError as exc:
            problems.append(f"{var}: {exc}")
    return out


def _parse_text(s: Setting, text: str) -> Any:
    """A variable's text as the setting's type (raises ValueError saying why)."""
    stripped = text.strip()
    if s.kind == "int":
        try:
            return int(stripped)
        except ValueError:
            raise ValueError(f"{text!r} is not an integer") from None
    if s.kind == "bool":
        if stripped.lower() in _TRUE:
            return True
        if stripped.lower() in _FALSE:
            return False
        raise ValueError(f"{text!r} is not a boolean (true/false, 1/0, yes/no, on/off)")
    if s.kind == "list":
        if not _split(text):
            raise ValueError("is empty")
        return tuple(_split(text))
    if s.kind == "filters":
        return tuple(FilterSpec(x) for x in _split(text))
    if s.kind == "listeners":
        return tuple(_split(text))  # NAME=HOST:PORT each, read by gather
    return text


def _check_range(s: Setting, value: Any, where: str, problems: list[str]) -> None:
    if s.kind == "choice" and value not in s.choices:
        problems.append(f"{where}: {value!r} is not one of {', '.join(s.choices)}")
    elif s.kind == "int" and s.minimum is not None and value < s.minimum:
        problems.append(f"{where}: {value} is below {s.minimum}")
    elif s.kind == "path" and not os.path.isfile(value):
        problems.append(f"{where}: the file {value} does not exist")
    elif s.name in ("listen", "metrics_listen") and not _is_host_port(value):
        problems.append(f"{where}: {value!r} is not host:port")
    elif s.name in _POSITIVE_OR_NONE and value != -1 and value <= 0:
        problems.append(f"{where}: {s.name} must be positive, or -1 for no limit, not {value}")


_POSITIVE_OR_NONE = (
    "queued_max_request_bytes",
    "connections_max_idle_ms",
    "request_receive_timeout_ms",
)


def _listeners(given: Any, where: str, problems: list[str]) -> tuple[Any, ...]:
    """The named listeners, those given as ``NAME=HOST:PORT`` (a flag's, a
    variable's) read."""
    out = []
    for item in given:
        if isinstance(item, str):
            try:
                item = listener_of_text(item)
            except ValueError as exc:
                problems.append(f"{where}: {exc}")
                continue
        out.append(item)
    return tuple(out)


def _conflicts(values: Mapping[str, Any], origin: Mapping[str, str]) -> list[str]:
    problems = []
    if values["upstream"] is None:
        problems.append("upstream is required (--upstream, TRAFKA_PROXY_UPSTREAM or the file)")
    if values["ssl_keyfile"] and not values["ssl_certfile"]:
        problems.append(f"{origin['ssl_keyfile']}: a key file needs ssl_certfile")
    if values["upstream_ssl_cafile"] and not values["upstream_ssl"]:
        problems.append(f"{origin['upstream_ssl_cafile']}: a CA file needs upstream_ssl")
    if values["upstream_ssl_certfile"] and not values["upstream_ssl"]:
        problems.append(f"{origin['upstream_ssl_certfile']}: a certificate needs upstream_ssl")
    if values["sni_domain"] and not values["ssl_certfile"]:
        problems.append(f"{origin['sni_domain']}: SNI needs ssl_certfile (TLS towards clients)")
    if values["ssl_client_auth"] != "none" and not values["ssl_cafile"]:
        problems.append(f"{origin['ssl_client_auth']}: client certificates need ssl_cafile")
    if (values["ssl_cafile"] or values["ssl_client_auth"] != "none") and not values["ssl_certfile"]:
        problems.append(f"{origin['ssl_client_auth']}: client certificates need ssl_certfile")
    host, _, port = values["listen"].rpartition(":")
    if host.strip("[]") in ("0.0.0.0", "::", "") and not values["advertised_host"]:
        problems.append(
            f"{origin['listen']}: listening on a wildcard address needs advertised_host"
        )
    if values["listeners"]:
        where = origin["listeners"]
        problems += [
            f"{where}: {p}"
            for p in problems_of(
                values["listeners"], int(port) if port.isdigit() else 0, values["advertised_host"]
            )
        ]
        if values["sni_domain"]:
            problems.append(f"{where}: listeners and sni_domain: choose one (SNI serves one port)")
    return problems


def proxy_config(values: Mapping[str, Any]) -> ProxyConfig:
    """The :class:`ProxyConfig` of resolved ``values`` (its filters not loaded).

    Raises:
        ValueError: ProxyConfig refuses them.
    """
    host, _, port_text = values["listen"].rpartition(":")
    port = int(port_text)
    base = values["node_port_base"]
    if base is None:  # deterministic by default (see docs/proxy.md, "Broker ports")
        base = port + 1 if port else None
    elif base == -1:
        base = None
    journal = values["journal"]
    topic = journal.partition(":")[2] or TOPIC if journal and _is_topic(journal) else None
    return ProxyConfig(
        upstream=tuple(s.strip() for s in values["upstream"] or () if s.strip()),
        host=host.strip("[]") or "0.0.0.0",
        port=port,
        node_port_base=base,
        journal_dir=None if topic else journal,
        journal_topic=topic,
        **{k: values[k] for k in _DIRECT},
    )


_DIRECT = [
    "advertised_host",
    "route_keys",
    "max_frame_size",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_cafile",
    "ssl_client_auth",
    "ssl_principal_mapping_rules",
    "sni_domain",
    "sni_port",
    "sni_virtual_hosts",
    "listeners",
    "upstream_ssl",
    "upstream_ssl_cafile",
    "upstream_ssl_certfile",
    "upstream_ssl_keyfile",
    "announce",
    "metrics_listen",
    "max_decompressed_bytes",
    "journal_takeover_grace_ms",
    "origin_headers",
    "coalesce",
    "queued_max_request_bytes",
    "connections_max_idle_ms",
    "request_receive_timeout_ms",
    "principal_credentials",
    "sasl_without_credentials",
    "sasl_oauthbearer_sub_claim_name",
]


def reference_table() -> str:
    """The settings as a Markdown table (docs/proxy.md, checked by a test)."""
    rows = [
        "| Setting (file key) | Flag | Environment variable | Type | Default | SIGHUP |",
        "|---|---|---|---|---|---|",
    ]
    for s in SETTINGS:
        kind = f"one of {', '.join(s.choices)}" if s.kind == "choice" else _KIND_NAMES[s.kind]
        flag = f"`{s.short}`, `{s.flag}`" if s.short else f"`{s.flag}`"
        flag += f", `--no-{s.flag[2:]}`" if s.kind == "bool" else ""
        default = "" if s.default in (None, ()) else f"`{_toml(s.default)}`"
        reload = "reloaded" if s.reload else "restart"
        rows.append(f"| `{s.name}` | {flag} | `{s.env}` | {kind} | {default} | {reload} |")
    rows.append("")
    rows += [f"- `{s.name}`: {s.help}" for s in SETTINGS]
    return "\n".join(rows) + "\n"


_KIND_NAMES = {
    "str": "a string",
    "int": "an integer",
    "bool": "a boolean",
    "list": "a list of strings",
    "path": "a file path",
    "choice": "a string",
    "filters": "a list of filters",
    "listeners": "a list of listeners",
}


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else str(value)


def _describe(raw: Any) -> str:
    return f"{type(raw).__name__} {raw!r}"


def _nearest(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def _split(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _is_topic(journal: str) -> bool:
    return journal == "topic" or journal.startswith("topic:")


def _is_host_port(value: str) -> bool:
    _host, sep, port = value.rpartition(":")
    return bool(sep) and port.isdigit() and 0 <= int(port) <= 65535
