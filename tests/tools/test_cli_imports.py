"""What a ``trafka`` command imports: what it uses, not the whole client (issue #60).

A command process paid about half a second of CPU importing ``trafka.sdk``
whole: the producer, the consumer, the admin client and the protocol tables,
whichever one it used. Now the packages load names when first used, and each
command imports its client when it runs. Structure, not time: each check looks
at ``sys.modules`` of a fresh interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from trafka.brokerlite import RunningBroker
from trafka.tools.cli import SUBCOMMANDS, main

pytestmark = pytest.mark.timeout(120)

# The clients, the protocol tables and the I/O runtime: none is needed to print
# a command's help or to refuse its arguments.
HEAVY = [
    "trafka.sdk.admin",
    "trafka.sdk.consumer",
    "trafka.sdk.producer",
    "trafka.sdk.share_consumer",
    "trafka.sdk.transport",
    "trafka.sdk.schemas",
    "trafka.codec.protocol",
    "construct",
    "trio",
]

# The commands of this package (trafka.tools) that talk to a cluster; `demo`
# and `console` run other parts (brokerlite, the console's server), `decode`
# is the codec's own tool.
CLIENT_COMMANDS = sorted(
    name
    for name, (target, _) in SUBCOMMANDS.items()
    if target.startswith("trafka.tools.") and name not in ("demo", "console", "decode", "log")
)


def _loaded(code: str, watched: list[str], *, stdin: bytes = b"") -> object:
    """What ``code`` prints as JSON, run in a fresh interpreter; it may use
    ``watched`` (the module names to look for) and ``loaded()``."""
    prelude = (
        "import json, sys\n"
        f"watched = {watched!r}\n"
        "def loaded():\n"
        "    return [m for m in watched if m in sys.modules]\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", prelude + code],
        input=stdin,
        capture_output=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout.decode().splitlines()[-1])


def test_importing_the_packages_loads_no_client() -> None:
    """``import trafka.sdk`` / ``trafka.codec`` load no client and no protocol
    table; every public name still imports from the same path."""
    code = (
        "import trafka.sdk, trafka.codec\n"
        "before = loaded()\n"
        "from trafka.sdk import Producer, Consumer, TopicPartition, open_admin\n"
        "from trafka.codec import ApiKey, api\n"
        "print(json.dumps([before, loaded(), Producer.__module__, ApiKey.__module__]))\n"
    )
    before, after, producer, api_key = _loaded(code, HEAVY)  # type: ignore[misc]
    assert before == []
    assert {"trafka.sdk.producer", "trafka.sdk.consumer", "trafka.sdk.admin"} <= set(after)
    assert (producer, api_key) == ("trafka.sdk.producer", "trafka.codec.messages")


def test_help_and_usage_errors_load_no_client() -> None:
    """``trafka --help``, each client command's ``--help`` and a usage error
    load none of the clients, the protocol tables, construct or trio. One
    interpreter runs them in turn; a command that loads any is named."""
    code = (
        "from click.testing import CliRunner\n"
        "from trafka.tools.cli import main\n"
        "seen = {}\n"
        f"for args in [['--help'], ['consume', '-o', 'stored', 't']] + [[n, '--help'] for n in {CLIENT_COMMANDS!r}]:\n"
        "    result = CliRunner().invoke(main, args)\n"
        "    assert result.exit_code in (0, 2), (args, result.output)\n"
        "    seen[' '.join(args)] = loaded()\n"
        "print(json.dumps(seen))\n"
    )
    seen = _loaded(code, HEAVY)
    assert isinstance(seen, dict) and len(seen) == len(CLIENT_COMMANDS) + 2
    assert {args: mods for args, mods in seen.items() if mods} == {}


def _run_loaded(args: list[str], stdin: bytes = b"") -> list[str]:
    """The watched modules the real entry point had loaded when it exited (0)."""
    code = (
        "import atexit\n"
        "atexit.register(lambda: print(json.dumps(loaded())))\n"
        "from trafka.tools.cli import main\n"
        f"sys.argv = ['trafka', *{args!r}]\n"
        "main()\n"
    )
    result = _loaded(code, WATCHED, stdin=stdin)
    assert isinstance(result, list)
    return result


# Each client's own modules (not what they share: the admin client uses the
# fetcher's ListOffsets and the group protocol's requests too).
WATCHED = [
    "trafka.sdk.admin",
    "trafka.sdk.consumer",
    "trafka.sdk.producer",
    "trafka.sdk.accumulator",
    "trafka.sdk.share_consumer",
]


def test_each_client_command_loads_its_client_alone(broker: RunningBroker, tmp_path: Path) -> None:
    """``topics`` loads the admin client, ``produce`` the producer, ``consume``
    the consumer: none of them the others."""
    bs = broker.bootstrap_servers
    topic = f"imports-{tmp_path.name}"
    created = CliRunner().invoke(main, ["topics", "create", topic, "-p", "1", "-b", bs])
    assert created.exit_code == 0, created.output
    assert _run_loaded(["topics", "list", "-b", bs]) == ["trafka.sdk.admin"]
    assert _run_loaded(["produce", topic, "-b", bs, "-q"], stdin=b"a\nb\n") == [
        "trafka.sdk.producer",
        "trafka.sdk.accumulator",
    ]
    assert _run_loaded(["consume", topic, "-e", "-q", "-b", bs]) == ["trafka.sdk.consumer"]
