"""The registry's libraries are an extra (``trafka[schemas]``): a broker without
``--schema-registry-listen`` neither needs nor imports them; with it and the
extra missing, the broker refuses to start with a message naming the extra.
With it, the broker logs where the registry is, as it logs its own listener."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trafka.brokerlite.errors import BrokerError
from trafka.brokerlite.registry import missing
from trafka.brokerlite.server import broker_in_thread


def test_missing_extra_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "fastavro", None)
    reason = missing()
    assert reason is not None and "fastavro" in reason and "trafka[schemas]" in reason
    settings = {"host": "127.0.0.1", "data_dir": tmp_path, "schema_registry_listen": "127.0.0.1:0"}
    with (
        pytest.raises(BrokerError, match=r"trafka\[schemas\]"),
        broker_in_thread(port=0, **settings),
    ):
        pass


def test_a_broker_without_the_registry_does_not_import_its_libraries(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["fastavro"] = None
        sys.modules["jsonschema"] = None
        from trafka.brokerlite.server import broker_in_thread
        with broker_in_thread(port=0, host="127.0.0.1", data_dir={str(tmp_path / "d")!r}) as running:
            assert running.schema_registry_address is None
        from trafka.tools.cli import main
        sys.argv = ["trafka", "broker", "--schema-registry-listen", "127.0.0.1:0",
                    "--data-dir", {str(tmp_path / "e")!r}]
        main()
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert "--schema-registry-listen" in done.stderr and "trafka[schemas]" in done.stderr


def test_the_registrys_address_is_logged(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    settings = {"host": "127.0.0.1", "data_dir": tmp_path, "schema_registry_listen": "127.0.0.1:0"}
    with (
        caplog.at_level(logging.INFO, logger="trafka.brokerlite"),
        broker_in_thread(port=0, **settings) as running,
    ):
        assert running.schema_registry_address is not None
        host, port = running.schema_registry_address
    said = [r.getMessage() for r in caplog.records if r.name == "trafka.brokerlite.registry"]
    assert f"schema registry on http://{host}:{port}/ (schemas kept in _schemas)" in said, said
