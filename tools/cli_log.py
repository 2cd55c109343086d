"""``trafka log``: brokerlite's data directory, read offline.

Rules:

* ``verify DATA_DIR [--topic T]...`` reads every record batch of every segment
  (:mod:`trafka.brokerlite.storage.verify`) and prints one line per damaged batch,
  ``FILE:POSITION: PROBLEM (batch at offset N)``, on stdout, then a summary on
  stderr. It changes nothing. Exit status 0 when every batch is sound, 1 when
  one is damaged (or a topic asked for has no partition there), 2 for a usage
  error.
* On a directory a running broker holds, it says so on stderr and checks
  anyway: the last batch of an active segment may then be one being written.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

__all__ = ["log_command"]


@click.group("log")
def log_command() -> None:
    """Check brokerlite's partition logs on disk."""


@log_command.command("verify")
@click.argument("data_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--topic", "topics", multiple=True, help="Only this topic's partitions (repeatable).")
def log_verify(data_dir: Path, topics: tuple[str, ...]) -> None:
    """Check the CRC32C and framing of every record batch under DATA_DIR."""
    from trafka.brokerlite.storage.verify import broker_running, partition_dirs, verify_data_dir

    if broker_running(data_dir):
        click.echo(
            f"note: a broker is running on {data_dir}; "
            "the active segments may change while they are read",
            err=True,
        )
    try:
        for topic in topics:
            if not partition_dirs(data_dir, [topic]):
                raise click.ClickException(f"no partition of topic {topic!r} in {data_dir}")
        report = verify_data_dir(data_dir, topics)
    except OSError as exc:
        raise click.ClickException(str(exc)) from None
    for damage in report.damaged:
        at = "" if damage.base_offset is None else f" (batch at offset {damage.base_offset})"
        click.echo(f"{damage.path}:{damage.position}: {damage.problem}{at}")
    click.echo(
        f"{report.partitions} partition(s), {report.segments} segment(s), "
        f"{report.batches} batch(es), {report.bytes} bytes: "
        + (f"{len(report.damaged)} damaged" if report.damaged else "all sound"),
        err=True,
    )
    if report.damaged:
        sys.exit(1)
