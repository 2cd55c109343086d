"""The one thing that differs between a service's two runs: which confluent-kafka it imports.

Every service of this folder takes ``--lib confluent`` (confluent-kafka itself,
``confluent_kafka``) or ``--lib trafka`` (trafka's drop-in,
``trafka.compat.confluent``) and reaches its client modules only through
:func:`module`, so the rest of its code is the same on both. What a service
observes (records, offsets, partitions, group state, configs) it prints with
:func:`emit`, one JSON object a line, sorted where the broker or the client may
order things differently, so two runs can be compared line for line.
"""

from __future__ import annotations

import argparse
import importlib
import json
from types import ModuleType
from typing import Any

#: ``--lib``'s choices and the package each one imports.
LIBS = {"confluent": "confluent_kafka", "trafka": "trafka.compat.confluent"}


def parser(description: str) -> argparse.ArgumentParser:
    """A service's command line: ``--lib`` and ``-b`` (the bootstrap servers)."""
    args = argparse.ArgumentParser(description=description)
    args.add_argument("--lib", choices=sorted(LIBS), default="confluent")
    args.add_argument("-b", dest="bootstrap_servers", required=True, help="host:port[,...]")
    return args


def module(lib: str, name: str = "") -> ModuleType:
    """``confluent_kafka[.name]`` or ``trafka.compat.confluent[.name]``."""
    return importlib.import_module(LIBS[lib] + (f".{name}" if name else ""))


def emit(event: str, **fields: Any) -> None:
    """Print one observation as a JSON line (bytes as text, keys sorted)."""
    print(json.dumps({"event": event, **fields}, sort_keys=True, default=_plain), flush=True)


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    if isinstance(value, set | frozenset | tuple):
        return sorted(value) if isinstance(value, set | frozenset) else list(value)
    return str(value)
