"""``trafka --help`` lists every command without importing one (issue #48).

The registry (``SUBCOMMANDS`` in tools/cli.py) carries the first sentence of
each command's help, and the listing is made from it. What keeps the registry
honest: each sentence is its command's, every registered command loads, and
the listing is, at several widths, what click makes from the commands
themselves.
"""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from trafka.tools.cli import SUBCOMMANDS, LazyGroup, main

WIDTHS = (50, 78, 120)


def _commands_section(help_text: str) -> str:
    return help_text.split("\nCommands:\n", 1)[1]


@pytest.fixture(scope="module")
def commands() -> dict[str, click.Command]:
    """Every registered command, imported (a group that is given no summaries
    imports each command to list it)."""
    group = LazyGroup(lazy_subcommands={name: target for name, (target, _) in SUBCOMMANDS.items()})
    ctx = click.Context(group)
    return {name: group.get_command(ctx, name) for name in SUBCOMMANDS}  # type: ignore[misc]


def test_every_registered_command_loads(commands: dict[str, click.Command]) -> None:
    for name, command in commands.items():
        assert not command.help or not command.help.startswith("Unavailable"), (name, command.help)


def test_each_summary_is_the_first_sentence_of_its_commands_help(
    commands: dict[str, click.Command],
) -> None:
    for name, (_, summary) in SUBCOMMANDS.items():
        words = (commands[name].help or "").split("\n\n", 1)[0].split()
        end = next((i for i, word in enumerate(words) if word.endswith(".")), len(words) - 1)
        assert summary == " ".join(words[: end + 1]), name


def test_the_listing_imports_no_command_and_is_what_the_commands_make(
    commands: dict[str, click.Command],
) -> None:
    child = (
        "import json, sys\n"
        "from click.testing import CliRunner\n"
        "from trafka.tools.cli import SUBCOMMANDS, main\n"
        f"outs = [CliRunner().invoke(main, ['--help'], terminal_width=w).output for w in {WIDTHS}]\n"
        "modules = {target.split(':')[0] for target, _ in SUBCOMMANDS.values()}\n"
        "print(json.dumps({'outs': outs, 'loaded': sorted(modules & set(sys.modules))}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["loaded"] == []

    reference = click.Group("trafka", commands=commands)
    for width, out in zip(WIDTHS, result["outs"], strict=True):
        expected = CliRunner().invoke(reference, ["--help"], terminal_width=width).output
        assert _commands_section(out) == _commands_section(expected), width
        assert all(f"  {name} " in out for name in SUBCOMMANDS)


def test_the_version_is_looked_up_when_asked() -> None:
    child = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from trafka.tools.cli import main\n"
        "CliRunner().invoke(main, ['--help'])\n"
        "print('importlib.metadata' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.strip() == "False", done.stderr
    result = CliRunner().invoke(main, ["-V"])
    assert result.exit_code == 0 and result.output.startswith("trafka, version ")
