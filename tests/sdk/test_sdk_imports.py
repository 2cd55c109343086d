"""What ``import trafka.sdk`` loads: the producer and consumer path, not the admin
client or the share consumer (most of the import time), which load when named."""

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
    """Issue #48: ``import trafka.sdk`` leaves out what a producer or consumer
    does not need at once: the admin client and the share consumer, the values
    only the admin client takes, ``importlib.metadata`` (the ``crc32c``
    package's ``__init__`` reads its version through it), and every compiled
    parser (a schema compiles on first use); no message class has made its
    dataclass description, and the pure-Python varint tables are not made."""
    code = (
        "import sys, trafka.sdk\n"
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
