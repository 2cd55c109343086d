"""The console's HTTP driver with a stand-in admin client: the host and client
settings rules, and what a page shows when the admin client fails in each way
(a refusal by the cluster, an unreachable cluster, a bug of ours)."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from trafka.codec import ErrorCode, KafkaError
from trafka.console.access import decide_access
from trafka.console.app import host_allowed, make_app
from trafka.console.cluster import Console, client_settings
from trafka.console.server import _allowed_hosts, parse_listen
from trafka.sdk import AdminConfig, ConsumerConfig, ProducerConfig
from trafka.sdk.errors import NoBrokersAvailableError

pytestmark = pytest.mark.timeout(60)


def test_host_allowed() -> None:
    loopback = _allowed_hosts("127.0.0.1", ("console.internal",))
    for host in ("127.0.0.1:8080", "localhost", "LOCALHOST:1", "[::1]:8080", "console.internal"):
        assert host_allowed(host, loopback), host
    for host in ("attacker.example", "127.0.0.2:8080", "", "[::1", "evil.127.0.0.1"):
        assert not host_allowed(host, loopback), host
    assert _allowed_hosts("0.0.0.0", ()) == ["*"] and host_allowed("anything", ["*"])
    assert host_allowed("[::1]:9", _allowed_hosts("::1", ()))


def test_parse_listen() -> None:
    assert parse_listen("127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert parse_listen("[::1]:0") == ("::1", 0)
    for bad in ("8080", ":8080", "host:", "host:http", "host:70000"):
        with pytest.raises(ValueError, match="HOST:PORT"):
            parse_listen(bad)


def test_one_set_of_client_settings_split_per_client() -> None:
    given = {
        "bootstrap.servers": "b:9092",
        "security.protocol": "SSL",
        "default.api.timeout.ms": 5000,  # admin and consumer
        "linger.ms": 5,  # producer only
        "fetch.min.bytes": 1,  # consumer only
        "no.such.setting": 1,  # nobody's: kept, so that the client names it
    }
    assert set(client_settings(AdminConfig, given)) == {
        "bootstrap.servers",
        "security.protocol",
        "default.api.timeout.ms",
        "no.such.setting",
    }
    assert "linger.ms" in client_settings(ProducerConfig, given)
    assert "linger.ms" not in client_settings(ConsumerConfig, given)
    assert "fetch.min.bytes" in client_settings(ConsumerConfig, given)


class FailingAdmin:
    """Answers ``describe_cluster`` with the error it was given."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    async def describe_cluster(self) -> Any:
        raise self.error

    async def list_topics(self, **_: Any) -> dict[str, int]:
        return {}

    async def describe_log_dirs(self) -> list[Any]:
        return []


def page_with(admin: Any, path: str) -> tuple[int, str]:
    async def main() -> tuple[int, str]:
        with trio.fail_after(30):
            console = Console(admin, {}, allowed_hosts=["127.0.0.1"])
            app = make_app(console, decide_access("127.0.0.1"))
            config = Config()
            config.bind = ["127.0.0.1:0"]
            config.accesslog = None
            async with trio.open_nursery() as nursery:
                binds = await nursery.start(serve, app, config)
                url = binds[0] + path

                def get() -> tuple[int, str]:
                    try:
                        with urllib.request.urlopen(url, timeout=10) as r:
                            return r.status, r.read().decode()
                    except urllib.error.HTTPError as exc:
                        return exc.code, exc.read().decode()

                answer = await trio.to_thread.run_sync(get)
                nursery.cancel_scope.cancel()
        return answer

    return trio.run(main)


@pytest.mark.parametrize(
    ("error", "status", "title", "says"),
    [
        (
            KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "describing the cluster"),
            502,
            "The cluster refused",
            "CLUSTER_AUTHORIZATION_FAILED",
        ),
        (
            NoBrokersAvailableError("no broker answered"),
            502,
            "Cluster unreachable",
            "no broker answered",
        ),
        (RuntimeError("a bug"), 500, "Console error", "the console&#39;s log says why"),
    ],
)
def test_failures_are_pages_not_tracebacks(
    error: BaseException, status: int, title: str, says: str, caplog: Any
) -> None:
    got, text = page_with(FailingAdmin(error), "/")
    assert got == status
    assert f"<h1>{title}</h1>" in text and says in text
    assert "Traceback" not in text and "a bug" not in text
    if status == 500:
        assert "console page / failed" in caplog.text  # the traceback went to the log


def test_without_the_extra_the_commands_say_what_to_install(monkeypatch: Any) -> None:
    import importlib.util

    from click.testing import CliRunner

    from trafka.console.server import missing_dependencies
    from trafka.tools.cli import main

    assert missing_dependencies() is None
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "starlette" else real(name, *a),
    )
    assert missing_dependencies() == "the console needs starlette: pip install 'trafka[console]'"
    result = CliRunner().invoke(main, ["console", "--listen", "127.0.0.1:0"])
    assert result.exit_code == 1 and "pip install 'trafka[console]'" in result.output
    result = CliRunner().invoke(main, ["broker", "--console-listen", "127.0.0.1:0"])
    assert (
        result.exit_code == 2 and "--console-listen: the console needs starlette" in result.output
    )
