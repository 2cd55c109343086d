"""The proxy's audit log: security-relevant events as JSON lines, to stdout or
to a file bounded in size (rotated as ``path.1``, ``path.2``... like
logrotate's numbered copies).

Rules:

* One event, one line: a JSON object with ``time`` (ISO 8601, UTC), ``event``
  and the event's fields. Events: ``connection_open`` / ``connection_close``
  (``client``: the client's address, ``principal``), ``authentication``
  (``outcome``: success or failure, ``mechanism``, ``principal`` on success,
  ``error`` on failure), ``authorization`` (a denial: ``principal``, ``api``,
  ``operation``, ``resource_type``, ``resource``), ``admin`` (an admin
  operation and its outcome per resource: ``api``, ``resources``, each with
  its ``error``). Each event of a client that came by a named listener
  (:mod:`.listeners`) names it (``listener``).
* A file's line is written whole before the next: the file is opened for
  appending, and each line written and flushed with one call. When a line
  would take the file past ``max_bytes``, the file is rotated first (at most
  ``backups`` old files kept; 0: the file is emptied instead). The workers of
  ``trafka proxy --workers`` share the file: each appends, measures the file
  itself before writing, and reopens the path when another rotated it.
* A write that fails (disk full) is counted and logged at most once a minute;
  the proxy goes on serving.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import sys
from collections.abc import Mapping
from typing import IO, Any

__all__ = ["AuditLog", "audit_settings"]

log = logging.getLogger("trafka.proxy")

_AUDIT_KEYS = {"path", "max_bytes", "backups", "allowed"}


class AuditLog:
    """Where audit events go.

    Args:
        path: a file, or ``-`` for stdout.
        max_bytes: the file's bound (0: none).
        backups: rotated files kept.
    """

    def __init__(self, path: str = "-", max_bytes: int = 100 << 20, backups: int = 3) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self.failed = 0  # lines not written
        self.written = 0
        self._file: IO[str] | None = None

    def write(self, event: str, **fields: Any) -> None:
        """Write one event (see the module's rules)."""
        now = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
        line = json.dumps({"time": now, "event": event, **fields}, default=str) + "\n"
        try:
            if self.path == "-":
                sys.stdout.write(line)
                sys.stdout.flush()
            else:
                self._to_file(line)
        except OSError as exc:
            self.failed += 1
            if self.failed == 1 or self.failed % 1000 == 0:
                log.error("audit log %s: %d lines not written: %s", self.path, self.failed, exc)
            return
        self.written += 1

    def _to_file(self, line: str) -> None:
        data = line.encode()
        if self._file is None or self._moved():
            self._open()
        assert self._file is not None
        size = os.fstat(self._file.fileno()).st_size  # other workers write to it too
        if self.max_bytes and size and size + len(data) > self.max_bytes:
            self._rotate()
        assert self._file is not None
        self._file.write(line)
        self._file.flush()

    def _moved(self) -> bool:
        """Whether the path no longer names the open file (another worker of
        ``trafka proxy --workers`` rotated it, or it was removed)."""
        assert self._file is not None
        try:
            return os.stat(self.path).st_ino != os.fstat(self._file.fileno()).st_ino
        except FileNotFoundError:
            return True

    def _open(self) -> None:
        self.close()
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - kept open

    def _rotate(self) -> None:
        self.close()
        if self.backups > 0:
            for n in range(self.backups - 1, 0, -1):
                older = f"{self.path}.{n}"
                if os.path.exists(older):
                    os.replace(older, f"{self.path}.{n + 1}")
            os.replace(self.path, f"{self.path}.1")
        else:
            os.truncate(self.path, 0)
        self._open()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def same(self, other: AuditLog) -> bool:
        return (self.path, self.max_bytes, self.backups) == (
            other.path,
            other.max_bytes,
            other.backups,
        )


def audit_settings(raw: Any, problems: list[str]) -> tuple[AuditLog | None, bool]:
    """The audit log the ``audit`` table of the filter's settings asks for
    (None: no audit log) and whether allowed decisions are logged too
    (``allowed``); problems added to ``problems``."""
    if raw is None:
        return None, False
    if not isinstance(raw, Mapping):
        problems.append(f"audit is a table (path, max_bytes, backups, allowed), not {raw!r}")
        return None, False
    found = len(problems)
    extra = sorted(set(raw) - _AUDIT_KEYS)
    if extra:
        problems.append(f"audit: unknown key {extra[0]!r} ({', '.join(sorted(_AUDIT_KEYS))})")
    path = raw.get("path", "-")
    if not isinstance(path, str) or not path:
        problems.append(f"audit: path {path!r} is not a file nor -")
    elif path != "-":
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            problems.append(f"audit: path {path!r}: its folder does not exist")
    max_bytes = raw.get("max_bytes", 100 << 20)
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 0:
        problems.append(f"audit: max_bytes {max_bytes!r} is not a size in bytes (0: no bound)")
    backups = raw.get("backups", 3)
    if not isinstance(backups, int) or isinstance(backups, bool) or backups < 0:
        problems.append(f"audit: backups {backups!r} is not a count of files")
    allowed = raw.get("allowed", False)
    if not isinstance(allowed, bool):
        problems.append(f"audit: allowed {allowed!r} is not true nor false")
    if len(problems) > found:
        return None, False
    return AuditLog(path, max_bytes, backups), allowed
