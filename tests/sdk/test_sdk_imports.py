"""What ``import trafka.sdk`` and ``import trafka.sdk.blocking`` load: the errors
and the settings (the rest loads when first named, issue #60), then with the producer and the
consumer their path, not the parts only some programs use (the admin client, the
share consumer, most statistics snapshots, zeroconf, the compression library),
which load when first named (issue #48). Structure, not time: each test looks
at ``sys.modules`` of a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys


def test_the_admin_client_and_share_consumer_load_when_first_named() -> None:
    code = (
        "import sys, trafka.sdk as sdk\n"
        "assert 'trafka.sdk.admin' not in sys.modules\n"
        "assert 'trafka.sdk.share_consumer' not in sys.modules\n"
        "assert callable(sdk.open_producer) and callable(sdk.open_consumer)\n"
        "from trafka.sdk import NewTopic, open_admin, ShareConsumer\n"
        "assert NewTopic('t', 1).name == 't' and 'trafka.sdk.admin' in sys.modules\n"
        "assert ShareConsumer.__module__ == 'trafka.sdk.share_consumer'\n"
        "assert 'open_admin' in dir(sdk)\n"
        "try:\n"
        "    sdk.no_such_name\n"
        "except AttributeError as exc:\n"
        "    assert 'no_such_name' in str(exc)\n"
        "else:\n"
        "    raise AssertionError('no AttributeError')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr


def test_importing_the_client_prepares_nothing_ahead() -> None:
    """Issue #48: loading the producer and the consumer leaves out what they do
    not need at once: the admin client and the share consumer, the values
    only the admin client takes, ``importlib.metadata`` (the ``crc32c``
    package's ``__init__`` reads its version through it), and every compiled
    parser (a schema compiles on first use); no message class has made its
    dataclass description, and the pure-Python varint tables are not made."""
    code = (
        "import sys\n"
        "from trafka.sdk import open_consumer, open_producer\n"
        "from trafka.codec import _batch_format, primitives, protocol\n"
        "lazy = ['trafka.sdk.admin', 'trafka.sdk.share_consumer', 'trafka.sdk.acls',\n"
        "        'trafka.sdk.quotas', 'trafka.sdk.delegation_tokens', 'importlib.metadata',\n"
        "        'crc32c']\n"
        "print('loaded', sorted(set(lazy) & set(sys.modules)))\n"
        "messages = [m for n, m in list(sys.modules.items())\n"
        "            if n.startswith('trafka.codec.messages.k')]\n"
        "print('message modules', len(messages) > 0)\n"
        "schemas = [v for m in messages for v in vars(m).values()\n"
        "           if isinstance(v, primitives.Schema)]\n"
        "print('compiled', protocol._compiled.cache_info().currsize,\n"
        "      [s.schema_name for s in schemas if {'_entries', '_parts'} & set(vars(s))])\n"
        "classes = {s.cls for s in schemas}\n"
        "print('described', len(classes) > 0,\n"
        "      [c.__qualname__ for c in classes if type(vars(c)['__dataclass_fields__']) is dict])\n"
        "print('tables', _batch_format._UV, _batch_format._ZZ2)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "loaded []",
        "message modules True",
        "compiled 0 []",
        "described True []",
        "tables [] []",
    ]


def test_the_blocking_clients_load_the_admin_client_with_the_first_admin() -> None:
    code = (
        "import sys, trafka.sdk.blocking as b\n"
        "print('trafka.sdk.admin' in sys.modules)\n"
        "try:\n"
        "    b.Admin(bootstrap_servers='127.0.0.1:1', request_timeout_ms=1)\n"
        "except Exception:\n"
        "    pass\n"
        "print('trafka.sdk.admin' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.stdout.split() == ["False", "True"], result.stderr


def _loaded_after(statement: str, modules: list[str]) -> list[str]:
    """Which of ``modules`` a fresh interpreter has loaded after ``statement``."""
    code = f"import sys\n{statement}\nprint(' '.join(m for m in {modules!r} if m in sys.modules))\n"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


# What importing the SDK leaves out (issue #48), each loaded on first use: the
# admin client, the share consumer (async and blocking), the statistics
# snapshots of the consumers and brokers (made when statistics() is called),
# the share consumer's and admin client's settings, TLS and SASL (loaded by the
# first client that uses them), zeroconf (loaded with the first client's
# bootstrap list, its multicast side only for a zeroconf spec), the
# snappy/lz4/zstd library, and difflib (for a mistyped config key).
OPTIONAL = [
    "trafka.sdk.admin",
    "trafka.sdk.acls",
    "trafka.sdk.share_consumer",
    "trafka.sdk.share_membership",
    "trafka.sdk.blocking_share",
    "trafka.sdk.statistics.brokers",
    "trafka.sdk.statistics.consuming",
    "trafka.sdk.config.share",
    "trafka.sdk.config.admin",
    "trafka.sdk.security",
    "trafka.codec.sasl",
    "trafka.discovery",
    "trafka.discovery._mdns",
    "cramjam",
    "difflib",
]


def test_the_blocking_clients_load_none_of_the_optional_parts() -> None:
    assert _loaded_after("import trafka.sdk.blocking", OPTIONAL) == []
    assert _loaded_after("from trafka.sdk import open_consumer, open_producer", OPTIONAL) == []


def test_no_statistics_snapshot_is_defined_at_import() -> None:
    """The snapshot types are built when statistics() is first asked for."""
    assert _loaded_after("import trafka.sdk.blocking", ["trafka.sdk.statistics.producing"]) == []


def test_the_parts_loaded_on_first_use_keep_their_public_names() -> None:
    """Every name of ``__all__`` still comes from the same path, and ``dir()``
    lists it, before it is loaded as after."""
    code = (
        "import importlib, sys\n"
        "for path in ('trafka.sdk', 'trafka.sdk.blocking', 'trafka.sdk.statistics',\n"
        "             'trafka.sdk.config', 'trafka.discovery'):\n"
        "    module = importlib.import_module(path)\n"
        "    listed = dir(module)\n"
        "    missing = [n for n in module.__all__ if n not in listed]\n"
        "    assert not missing, (path, missing)\n"
        "    for name in module.__all__:\n"
        "        assert getattr(module, name) is not None, (path, name)\n"
        "from trafka.sdk.blocking import ShareConsumer\n"
        "from trafka.sdk.statistics import ConsumerStatistics, NodeCounters, broker_statistics\n"
        "from trafka.discovery import discover_blocking\n"
        "import trafka.sdk.statistics.counters as counters\n"
        "assert NodeCounters is counters.NodeCounters\n"
        "print(ShareConsumer.__module__, ConsumerStatistics.__module__,\n"
        "      broker_statistics.__module__, discover_blocking.__module__)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "trafka.sdk.blocking_share",
        "trafka.sdk.statistics.consuming",
        "trafka.sdk.statistics.brokers",
        "trafka.discovery._mdns",
    ]


def test_the_modules_around_the_settings_import_first() -> None:
    """The settings (``sdk.config``) and tracing import each other's modules,
    and the package no longer loads every module ahead (issue #60): each of
    these is a fresh program's first import without an import error."""
    for module in (
        "trafka.sdk.tracing",
        "trafka.sdk.interceptors",
        "trafka.sdk.config.values",
        "trafka.sdk.config.client",
        "trafka.sdk.config.producer",
        "trafka.codec.protocol",
    ):
        done = subprocess.run(
            [sys.executable, "-c", f"import {module}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, (module, done.stderr)
