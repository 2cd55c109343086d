"""``trafka proxy``'s configuration: one table of settings makes its flags, its
TOML file's keys and its ``TRAFKA_PROXY_*`` variables; a flag beats its
variable, which beats the file, which beats the default; variables are typed as
the flags and a bad one is named; ``--check-config`` reports every problem at
once (as the SDK's ConfigError does for clients) and binds nothing; the
reference in docs/proxy.md is the table's; broker ports follow the listen port
by default (docs/proxy.md, "Broker ports")."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from pathlib import Path
from typing import Any

import confluent_kafka.admin
import pytest
from click.testing import CliRunner

from trafka.brokerlite import RunningBroker
from trafka.proxy import proxy_in_thread
from trafka.proxy.cli import command
from trafka.proxy.service import check
from trafka.proxy.settings import SETTINGS, FilterSpec, Sources, reference_table, resolve
from trafka.sdk import ConfigError

pytestmark = pytest.mark.timeout(120)

HERE = Path(__file__).parent
PAGE = HERE.parents[1] / "docs" / "proxy.md"
BEGIN, END = "<!-- proxy-settings:begin -->\n", "<!-- proxy-settings:end -->"
FILTER = "settings_filter:ClusterIdFilter"


@pytest.fixture(autouse=True)
def _filter_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    for name in [k for k in os.environ if k.startswith("TRAFKA_PROXY_")]:
        monkeypatch.delenv(name)


def run(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(command, list(args), env=env, catch_exceptions=False)


def test_a_flag_beats_its_variable_which_beats_the_file_which_beats_the_default(
    tmp_path: Path,
) -> None:
    toml = tmp_path / "proxy.toml"
    toml.write_text(
        'upstream = "127.0.0.1:9092"\n'
        "connections_max_idle_ms = 1000\n"
        "request_receive_timeout_ms = 1000\n"
        "max_frame_size = 1000\n"
        "coalesce = true\n"
        f'filter = [{{use = "{FILTER}", settings = {{cluster_id = "from-file"}}}}]\n'
    )
    env = {
        "TRAFKA_PROXY_CONNECTIONS_MAX_IDLE_MS": "2000",
        "TRAFKA_PROXY_REQUEST_RECEIVE_TIMEOUT_MS": "2000",
        "TRAFKA_PROXY_COALESCE": "false",
    }
    flags = ["--connections-max-idle-ms", "3000", "--listen", "127.0.0.1:0"]
    result = run("--config", str(toml), *flags, "--check-config", env=env)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "the configuration is valid",
        f"  upstream = 127.0.0.1:9092  ({toml}: upstream)",
        "  listen = 127.0.0.1:0  (--listen)",
        f"  max_frame_size = 1000  ({toml}: max_frame_size)",
        "  coalesce = False  (TRAFKA_PROXY_COALESCE)",
        "  connections_max_idle_ms = 3000  (--connections-max-idle-ms)",
        "  request_receive_timeout_ms = 2000  (TRAFKA_PROXY_REQUEST_RECEIVE_TIMEOUT_MS)",
        f"  filter = {FILTER}  ({toml}: filter)",
    ]
    # The same sources, as the proxy would serve them.
    flags_given = {"connections_max_idle_ms": 3000, "listen": "127.0.0.1:0"}
    loaded = check(Sources(flags_given, env, str(toml)))
    config = loaded.config
    assert (config.connections_max_idle_ms, config.request_receive_timeout_ms) == (3000, 2000)
    assert (config.max_frame_size, config.coalesce) == (1000, False)
    assert config.journal_takeover_grace_ms == 5000  # the default
    assert [type(f).__name__ for f in config.filters] == ["ClusterIdFilter"]
    assert config.filters[0].cluster_id == "from-file"  # type: ignore[attr-defined]


def test_every_setting_is_a_flag_a_variable_and_a_file_key(tmp_path: Path) -> None:
    """Each setting of the table, given only by its variable, then only by the
    file, arrives typed and says where it came from; ``--help`` names its flag
    and its variable."""
    afile = tmp_path / "some.pem"
    afile.write_text("")
    samples = {
        "int": (7, "7"),
        "bool": (True, "true"),
        "path": (str(afile), str(afile)),
        "list": (["h:1", "h:2"], "h:1,h:2"),
        "filters": ([FILTER], FILTER),
        # the file's tables are tests/proxy/test_proxy_listener_tenants.py's; strings too
        "listeners": (["a=127.0.0.1:7"], "a=127.0.0.1:7"),
    }
    help_text = run("--help").output
    base = {"upstream": ("h:9",), "upstream_ssl": True, "ssl_certfile": str(afile)}
    for s in SETTINGS:
        if s.kind == "choice":
            in_file, in_env = s.choices[-1], s.choices[-1]
        elif s.kind == "str":
            in_file = in_env = "127.0.0.1:7"
        else:
            in_file, in_env = samples[s.kind]
        values, origin = resolve(Sources(base | {s.name: None}, {s.env: in_env}))
        assert origin[s.name] == s.env
        toml = tmp_path / f"{s.name}.toml"
        toml.write_text(f"{s.name} = {_toml(in_file)}\n")
        from_file, origin = resolve(Sources(base | {s.name: None}, {}, str(toml)))
        assert origin[s.name] == f"{toml}: {s.name}"
        assert from_file[s.name] == values[s.name], s.name
        if s.kind == "filters":
            assert values[s.name] == (FilterSpec(FILTER),)
        assert s.flag in help_text and s.env in help_text, s.name


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return f'"{value}"' if isinstance(value, str) else str(value)


def test_variables_are_typed_as_the_flags_and_a_bad_one_is_named() -> None:
    env = {
        "TRAFKA_PROXY_UPSTREAM": " a:1, b:2 ",
        "TRAFKA_PROXY_WORKERS": "2",
        "TRAFKA_PROXY_ANNOUNCE": "off",
        "TRAFKA_PROXY_LISTEN": "127.0.0.1:0",
    }
    values, _ = resolve(Sources({}, env))
    assert (values["upstream"], values["workers"], values["announce"]) == (("a:1", "b:2"), 2, False)
    bad = env | {
        "TRAFKA_PROXY_WORKERS": "two",
        "TRAFKA_PROXY_ANNOUNCE": "maybe",
        "TRAFKA_PROXY_ROUTE_KEYS": "md5",
        "TRAFKA_PROXY_NODE_PORT_BASE": "-5",
    }
    with pytest.raises(ConfigError) as caught:
        resolve(Sources({}, bad))
    assert sorted(caught.value.problems) == [
        "TRAFKA_PROXY_ANNOUNCE: 'maybe' is not a boolean (true/false, 1/0, yes/no, on/off)",
        "TRAFKA_PROXY_NODE_PORT_BASE: -5 is below -1",
        "TRAFKA_PROXY_ROUTE_KEYS: 'md5' is not one of none, murmur2, crc32, fnv1a",
        "TRAFKA_PROXY_WORKERS: 'two' is not an integer",
    ]


def test_check_config_reports_every_problem_at_once_and_binds_nothing(tmp_path: Path) -> None:
    with socket.socket() as held:  # the listen port is taken: a start would fail
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        toml = tmp_path / "proxy.toml"
        toml.write_text(
            'uptream = "127.0.0.1:9092"\n'
            'max_frame_size = "1MB"\n'
            f'ssl_keyfile = "{tmp_path}/missing-key.pem"\n'
            f'filter = [{{use = "{FILTER}", settings = {{cluster = "x"}}}}]\n'
        )
        env = {"TRAFKA_PROXY_CONECTIONS_MAX_IDLE_MS": "5"}
        result = run("--config", str(toml), "--check-config", env=env)
        assert result.exit_code == 1, result.output
        problems = [line[4:] for line in result.output.splitlines() if line.startswith("  - ")]
        assert result.output.startswith(f"Error: {len(problems)} problems in the configuration:")
        assert sorted(problems) == sorted(
            [
                f"{toml}: uptream: unknown setting (did you mean upstream?)",
                f"{toml}: max_frame_size: str '1MB' is not an integer",
                f"{toml}: ssl_keyfile: the file {tmp_path}/missing-key.pem does not exist",
                f"{toml}: ssl_keyfile: a key file needs ssl_certfile",
                "TRAFKA_PROXY_CONECTIONS_MAX_IDLE_MS: unknown setting "
                "(did you mean TRAFKA_PROXY_CONNECTIONS_MAX_IDLE_MS?)",
                "upstream is required (--upstream, TRAFKA_PROXY_UPSTREAM or the file)",
                # The filter's settings with the others, not once they are right.
                f"{toml}: filter: filter {FILTER}: unknown setting 'cluster'",
            ]
        )
        # A start with the same configuration refuses it the same way, as a
        # usage error (exit 2), before anything is started.
        started = run("--config", str(toml), env=env)
        assert started.exit_code == 2, started.output
        assert all(p in started.output for p in problems)
        # What only trying tells: the certificate is not one; with the filter's.
        bad_cert = tmp_path / "cert.pem"
        bad_cert.write_text("not a certificate")
        toml.write_text(
            'upstream = "127.0.0.1:9092"\n'
            f'ssl_certfile = "{bad_cert}"\n'
            f'filter = [{{use = "{FILTER}", settings = {{cluster = "x"}}}}]\n'
        )
        result = run("--config", str(toml), "--listen", f"127.0.0.1:{port}", "--check-config")
        assert result.exit_code == 1, result.output
        assert f"{toml}: filter: filter {FILTER}: unknown setting 'cluster'" in result.output
        assert f"cannot load the certificate {bad_cert}" in result.output
        # Valid, on the port held: checked without binding it.
        toml.write_text('upstream = "127.0.0.1:9092"\n')
        result = run("--config", str(toml), "--listen", f"127.0.0.1:{port}", "--check-config")
        assert result.exit_code == 0, result.output
        assert result.output.startswith("the configuration is valid\n")


def test_check_config_names_every_filters_problems_with_the_settings(tmp_path: Path) -> None:
    """Every filter's problems with the general settings' (not once those are
    right), each of a filter's on its own line: an unknown key as unknown, with
    the nearest known name, and a required one left out as missing."""
    toml = tmp_path / "proxy.toml"
    toml.write_text(
        'uptream = "127.0.0.1:9092"\n'
        "[[filter]]\n"
        'use = "trafka.proxy:SchemaValidation"\n'
        "[filter.settings]\n"
        '"schema.registry.ur" = "http://127.0.0.1:8081"\n'
        "validate_key = true\n"
        'topics = ["orders-.*", "(("]\n'
        "[[filter]]\n"
        f'use = "{FILTER}"\n'
        "settings = {cluster_id = 5}\n"
        "[[filter]]\n"
        'use = "no_such_module:Filter"\n'
    )
    result = run("--config", str(toml), "--check-config", env={"TRAFKA_PROXY_WORKERS": "two"})
    assert result.exit_code == 1, result.output
    problems = [line[4:] for line in result.output.splitlines() if line.startswith("  - ")]
    assert result.output.startswith(f"Error: {len(problems)} problems in the configuration:")
    validation = f"{toml}: filter: filter trafka.proxy:SchemaValidation: "
    # The regular expression's problem as Python's re words it.
    (bad_pattern,) = [p for p in problems if "topics:" in p]
    assert bad_pattern.startswith(validation + "topics: '((' is not a regular expression: ")
    problems.remove(bad_pattern)
    assert sorted(problems) == sorted(
        [
            f"{toml}: uptream: unknown setting (did you mean upstream?)",
            "TRAFKA_PROXY_WORKERS: 'two' is not an integer",
            "upstream is required (--upstream, TRAFKA_PROXY_UPSTREAM or the file)",
            validation + "unknown setting 'schema.registry.ur' (did you mean schema.registry.url?)",
            validation + "unknown setting 'validate_key' (did you mean validate.keys?)",
            validation + "missing setting 'schema.registry.url' (the registry's URL)",
            f"{toml}: filter: filter {FILTER}: cluster_id must be a string",
            f"{toml}: filter: filter 'no_such_module:Filter': No module named 'no_such_module'",
        ]
    )
    # Fixed, the same filter is valid: nothing was left unsaid.
    toml.write_text(
        'upstream = "127.0.0.1:9092"\n'
        "[[filter]]\n"
        'use = "trafka.proxy:SchemaValidation"\n'
        "[filter.settings]\n"
        '"schema.registry.url" = "http://127.0.0.1:8081"\n'
        "validate_keys = true\n"
        'topics = ["orders-.*"]\n'
    )
    result = run("--config", str(toml), "--check-config")
    assert result.exit_code == 0, result.output


def test_the_reference_in_docs_is_the_settings_table() -> None:
    """docs/proxy.md's reference is made from the table; ``TRAFKA_WRITE_DOCS=1``
    writes it (as the compat page's rows are)."""
    text = PAGE.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    assert rest, f"{PAGE} lacks {BEGIN.strip()}"
    wanted = head + BEGIN + reference_table() + END + tail
    if os.environ.get("TRAFKA_WRITE_DOCS") == "1" and wanted != text:
        PAGE.write_text(wanted)
        print("docs/proxy.md's settings reference written", file=sys.stderr)
        return
    assert text == wanted, "docs/proxy.md's reference is stale: run with TRAFKA_WRITE_DOCS=1"


def _free_ports_in_a_row(count: int) -> int:
    """A port P with P to P + count - 1 free now."""
    for _ in range(50):
        with contextlib.ExitStack() as stack:
            socks = [stack.enter_context(socket.socket()) for _ in range(count)]
            socks[0].bind(("127.0.0.1", 0))
            port = int(socks[0].getsockname()[1])
            try:
                for i, sock in enumerate(socks[1:], 1):
                    sock.bind(("127.0.0.1", port + i))
            except OSError:
                continue
            return port
    raise AssertionError(f"no {count} free ports in a row")


def test_broker_ports_follow_the_listen_port_by_default(broker: RunningBroker) -> None:
    """Without node_port_base, ``trafka proxy --listen HOST:P`` serves broker N on
    P + 1 + N (docs/proxy.md, "Broker ports"): a client is told that port."""
    # The listen port, the base (broker 0's) and brokerlite's broker 1's: a
    # port taken meanwhile is served on a free one instead (logged).
    port = _free_ports_in_a_row(3)
    flags = {"upstream": (broker.bootstrap_servers,), "listen": f"127.0.0.1:{port}"}
    config = check(Sources(flags)).config
    assert config.node_port_base == port + 1
    with proxy_in_thread(config) as px:
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": px.bootstrap_servers})
        brokers = admin.list_topics(timeout=30).brokers
        assert brokers and {b.port for b in brokers.values()} == {
            port + 1 + node_id for node_id in brokers
        }
    opted_out = check(Sources(flags | {"node_port_base": -1})).config
    assert opted_out.node_port_base is None


def test_a_file_that_cannot_be_read_is_the_problem_named(tmp_path: Path) -> None:
    """Not also every setting it would have given (``upstream is required``)."""
    missing = tmp_path / "missing.toml"
    result = run("--config", str(missing), "--check-config")
    assert result.exit_code == 1, result.output
    assert result.output == (
        f"Error: cannot read the configuration file {missing}: No such file or directory\n"
    )
    broken = tmp_path / "broken.toml"
    broken.write_text("upstream = [\n")
    result = run("--config", str(broken), "--check-config")
    assert result.exit_code == 1, result.output
    assert result.output.startswith(f"Error: {broken} is not TOML: ")
    assert "upstream is required" not in result.output
