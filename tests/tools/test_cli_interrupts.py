"""Ctrl-C wherever it lands in a command's life ends the command as interrupted:
exit status 130, one line, no traceback and nothing left behind
(:func:`trafka.tools.cli_faults.run_interruptible`); one more, while the command
stops, quits at once.

The commands run in a process of their own (SIGINT is the whole process's),
again and again against brokerlite, each run with the signal raised at another
of its context managers' exits (tests/tools/interrupt_points.py), from the
parsing of the subcommand to trio's shutdown after the command's work. When
trio's own handler raised KeyboardInterrupt there, in anyio's or contextlib's
``__exit__`` before the cancel scope or task group under it was closed, trio's
scope stack was left corrupted: the command ended on "Nursery stack corrupted"
or "Cancel scope stack corrupted", a traceback and exit 1 (in CI once, as
``Nursery.__del__``'s assertion).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio
from terminal_sigint import sigint_as_at_a_terminal

from trafka.brokerlite import RunningBroker
from trafka.sdk import NewTopic, TopicPartition, open_admin
from trafka.sdk.blocking import Admin

pytestmark = pytest.mark.timeout(120)

POINTS = Path(__file__).with_name("interrupt_points.py")
CLI_PAGE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
#: A hang guard for a process, far above what it needs; not a timing assertion.
HANG_S = 90.0
TOPIC = "interrupts"


@pytest.fixture(scope="module")
def bootstrap(broker: RunningBroker) -> str:
    async def make() -> None:
        with trio.fail_after(HANG_S):
            async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
                await admin.create_topics([NewTopic(TOPIC, 1)])

    trio.run(make)
    return broker.bootstrap_servers


def interrupted_runs(bootstrap: str, runs: int, *args: str) -> list[dict[str, Any]]:
    """``trafka args`` without a signal, then ``runs`` times with one (see
    interrupt_points.py); the first is the run without."""
    done = subprocess.run(
        [sys.executable, str(POINTS), str(runs), *args, "-b", bootstrap],
        preexec_fn=sigint_as_at_a_terminal,
        capture_output=True,
        text=True,
        timeout=HANG_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


# An admin command (the family of the CI flake: trio's stack corrupted by a
# KeyboardInterrupt in an __exit__), and consume -e, which watches the signals
# itself while it reads (it says "SIGINT: stopping" then) and leaves them to
# the command line before and after.
@pytest.mark.parametrize(
    ("args", "runs"),
    [
        (["quotas", "alter", "--client-id", "c", "--add-config", "producer_byte_rate=1024"], 40),
        # fetch.max.wait.ms: the end of an empty topic is found at once.
        (["consume", TOPIC, "-e", "-X", "fetch.max.wait.ms=10"], 8),
    ],
    ids=["quotas alter", "consume"],
)
def test_sigint_wherever_it_lands_ends_the_command_as_interrupted(
    bootstrap: str, args: list[str], runs: int
) -> None:
    baseline, *results = interrupted_runs(bootstrap, runs, *args)
    assert baseline["rc"] == 0, baseline
    assert baseline["moments"] > runs  # the runs land at distinct moments
    # A run may have a few moments fewer than the first (how soon an answer
    # comes changes the path): then the last points come after its end.
    fired = [r for r in results if r["at"] is not None]
    assert len(fired) * 4 >= len(results) * 3, results
    assert [run for run in results if run["at"] is None and run["rc"] != 0] == []
    failed = [
        f"SIGINT at moment {run['k']}, in {run['at']}: exit {run['rc']}\n{run['err']}"
        for run in fired
        if not interrupted(run["rc"], run["err"])
    ]
    assert not failed, f"{len(failed)} of {len(fired)} runs:\n" + "\n".join(failed)


def interrupted(rc: object, err: str) -> bool:
    """Ended as interrupted: 130, said so, and no traceback, unraisable exception,
    coroutine never awaited or socket left open."""
    said = re.search(r"(?m)^(interrupted \(SIGINT\)|SIGINT: stopping)", err)
    return rc == 130 and bool(said) and not re.search(r"Traceback|Exception ignored|Warning", err)


# The command's work, stuck in a cleanup that cancellation does not reach (a
# shielded close that would wait for a hung broker).
_STUBBORN = """
import sys, trio
from trafka.tools.cli_faults import run_interruptible

async def stubborn():
    try:
        print("working", flush=True)
        await trio.sleep_forever()
    finally:
        with trio.CancelScope(shield=True):
            print("cleaning up", flush=True)
            await trio.sleep_forever()

try:
    run_interruptible(stubborn)
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


def test_a_second_sigint_quits_at_once() -> None:
    with subprocess.Popen(
        [sys.executable, "-c", _STUBBORN],
        preexec_fn=sigint_as_at_a_terminal,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None and proc.stderr is not None
            assert proc.stdout.readline() == "working\n"
            proc.send_signal(signal.SIGINT)  # cancels the work: its cleanup starts
            assert proc.stdout.readline() == "cleaning up\n"
            proc.send_signal(signal.SIGINT)  # and does not wait for it
            rc = proc.wait(timeout=HANG_S)
            out, err = proc.stdout.read(), proc.stderr.read()
        finally:
            proc.kill()
    assert rc == 128 + signal.SIGINT
    assert err == "SIGINT: quitting at once\n"
    assert out == ""  # it did not wait for the run to end
    assert "(`SIGINT: quitting at once`)" in CLI_PAGE.read_text()  # as docs/cli.md says


def test_an_interrupted_run_raises_keyboard_interrupt_once_it_is_over() -> None:
    """A SIGINT once the work is done, before trio.run returns, still makes it an
    interrupted run; without one, the result comes back; either way Python's
    handler is back afterwards."""
    script = """
import signal, trio
from trafka.tools.cli_faults import run_interruptible

async def work(late):
    await trio.sleep(0)
    if late:  # taken at once: the cancellation finds no await left
        signal.raise_signal(signal.SIGINT)
    return "result"

print(run_interruptible(work, False), flush=True)
try:
    print(run_interruptible(work, True))
except KeyboardInterrupt:
    print("interrupted", flush=True)
print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        preexec_fn=sigint_as_at_a_terminal,
        capture_output=True,
        text=True,
        timeout=HANG_S,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "result\ninterrupted\nTrue\n", "")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_ctrl_c_on_produce_with_its_input_still_open(bootstrap: str) -> None:
    """``trafka produce`` reading a pipe that stays open (a terminal, or a
    program upstream) is interrupted once lines were read and delivered,
    while it waits for more.
    Each run ends as interrupted, exit 130, and never as the interpreter's
    abort at exit (134, "could not acquire lock for <stdin>"): the input's
    reader is a thread blocked on the pipe when the signal comes, and it must
    not hold a lock that the interpreter's exit needs."""
    failed = []
    tp = TopicPartition(TOPIC, 0)
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        for k, lines in enumerate([1, 50, 2]):
            failed += _interrupted_produce(admin, bootstrap, tp, lines, k)
    assert not failed, "\n".join(failed)


def _end(admin: Admin, tp: TopicPartition) -> int:
    found = admin.list_offsets({tp: "latest"})[tp]
    assert found is not None
    return int(found[0])


def _interrupted_produce(
    admin: Admin, bootstrap: str, tp: TopicPartition, lines: int, k: int
) -> list[str]:
    """One run of ``trafka produce`` given ``lines`` lines and then SIGINT."""
    before = _end(admin, tp)
    with subprocess.Popen(
        [sys.executable, "-m", "trafka.tools.cli", "produce", TOPIC, "-b", bootstrap],
        preexec_fn=sigint_as_at_a_terminal,
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdin is not None and proc.stderr is not None
        try:
            proc.stdin.write(b"".join(b"line %d\n" % i for i in range(lines)))
            proc.stdin.flush()
            # Once they are in the topic (read and delivered), the command
            # is past its start and waits for more input.
            for _ in range(int(HANG_S * 10)):
                if _end(admin, tp) >= before + lines:
                    break
                time.sleep(0.1)
            proc.send_signal(signal.SIGINT)
            rc = proc.wait(timeout=HANG_S)
        finally:
            proc.kill()
            proc.stdin.close()
        err = proc.stderr.read().decode(errors="replace")
    said = re.search(r"(?m)^(interrupted \(SIGINT\)|SIGINT: delivering what was read)", err)
    if rc != 130 or not said or re.search(r"Fatal Python error|Traceback|Exception ignored", err):
        return [f"run {k} ({lines} lines): exit {rc}\n{err}"]
    return []
