"""The demo runs, decodes its frames and round-trips its responses."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from click.testing import CliRunner

from trafka.codec import protocol
from trafka.tools import demo, pipeline
from trafka.tools.cli import main
from trafka.tools.decode import decode_stream


def test_run_prints_decoded_frames() -> None:
    out: list[str] = []
    assert demo.run(out.append, broker=False) == 0
    text = "\n".join(out)
    assert '"api_name": "Metadata"' in text
    assert '"api_name": "Produce"' in text
    assert '"compression": "lz4"' in text
    assert 'key customer-42  value {"item": "cups", "qty": 6}  headers [source=app]' in text
    assert text.count("round trip ok") == 2
    assert out[-1] == "demo: ok"

    # The JSON printed for each frame is exactly what `trafka decode` produces.
    start = out.index("== 2. Decoded by `trafka decode` (one JSON object per frame)") + 1
    end = next(i for i, line in enumerate(out) if line.startswith("The lz4 batch"))
    decoder = json.JSONDecoder()
    blob = "\n".join(out[start:end])
    printed, pos = [], 0
    while pos < len(blob):
        obj, pos = decoder.raw_decode(blob, pos)
        printed.append(obj)
        while pos < len(blob) and blob[pos].isspace():
            pos += 1
    assert printed == list(decode_stream(demo.build_request_stream()))


def test_request_stream_is_what_the_brief_promises() -> None:
    frames = list(decode_stream(demo.build_request_stream()))
    assert [(f["api_name"], f["api_version"]) for f in frames] == [("Metadata", 12), ("Produce", 9)]
    assert protocol.api(0).is_flexible(frames[1]["api_version"])
    (batch,) = frames[1]["body"]["topic_data"][0]["partition_data"][0]["records"]
    assert batch["compression"] == "lz4"
    assert len(batch["records"]) == len(demo.RECORDS)
    assert all(r["key"] and r["headers"] for r in batch["records"])


def test_demo_reports_a_failed_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    real = protocol.decode_response

    def lossy(frame: bytes, key: int, version: int) -> tuple[object, object]:
        head, _ = real(frame, key, version)
        return head, None

    monkeypatch.setattr(demo.protocol, "decode_response", lossy)
    out: list[str] = []
    assert demo.run(out.append, broker=False) == 1
    assert out[-1] == "demo: FAILED"


def test_trafka_demo_command_without_broker() -> None:
    result = CliRunner().invoke(main, ["demo", "--no-broker"])
    assert result.exit_code == 0, result.output
    assert "main job" not in result.output
    assert result.output.rstrip().endswith("demo: ok")


def test_pipeline_checks_can_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    """The main job's checks are real: a wrong partitioner expectation makes
    the pipeline (and the demo) fail. (That it holds, with each of its checks,
    is `make demo`'s: the demo runs it and exits 1 when a check fails.)"""
    out: list[str] = []
    monkeypatch.setattr(pipeline, "expected_partition", lambda key: 0)
    assert not trio.run(pipeline.main_job, out.append, 30)
    assert any(line.startswith("  FAILED: every key is on its murmur2 partition") for line in out)


# `python -m trafka.tools.demo` itself is not run here: CI runs `make demo` (that very
# command, in the same install) just before `make test` (.ci/run), and the demo exits 1
# when any of its checks fails (the whole path's, the pipeline's, the schema step's, a
# round trip). A test that ran it again (test_python_m_demo, 31 s of the suite's wall
# time: Spark's start-up, mostly) proved one thing more: that no step was skipped,
# since a step whose peer is missing is skipped with exit status 0. That is what
# test_a_full_install_skips_no_demo_step below checks, without running the demo. The
# demo's parts run here too: the pipeline's checks (test_pipeline_checks_can_fail), the
# whole path (test_the_whole_path_fails_loudly) and the demo without Spark
# (test_demo_with_kafka_python_but_not_lz4, test_demo_on_a_plain_install); its Spark
# step runs in `make demo` only.


def test_the_whole_path_fails_loudly(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A placement the proxy did not make (every key expected on partition 0) is
    said, and the whole path stops there, false. On the way, its services print
    nothing of their own (confluent-kafka's librdkafka logs through a logger:
    no ``%6|...|GETSUBSCRIPTIONS|`` line amid the demo's)."""
    from trafka.tools import whole_path

    monkeypatch.setattr(whole_path, "murmur2_partition", lambda key, n: 0)
    out: list[str] = []
    assert not trio.run(whole_path.whole_path, out.append)
    assert out[-1].startswith("FAILED: 1200 orders in the topic, keys off their partition")
    assert not re.search(r"(?m)^%\d\|", capfd.readouterr().err)


def test_the_schema_step_prints_only_its_lines(capfd: pytest.CaptureFixture[str]) -> None:
    """The schema step's broker stops with its registry's clients still open:
    they go quietly (no "broker 1 ... is unreachable" once the step is done)."""
    from trafka.tools.schemas_demo import schema_step

    out: list[str] = []
    assert schema_step(out.append)
    assert [line for line in out if "FAILED" in line] == []
    captured = capfd.readouterr()
    assert "unreachable" not in captured.err + captured.out, captured.err


# -- the demo on a plain `pip install trafka` ---------------------------------------------

# What `pip install trafka` does not bring: the demo's peers and the extras.
NOT_IN_A_PLAIN_INSTALL = {
    "confluent_kafka",
    "kafka",  # kafka-python
    "lz4",
    "aiokafka",
    "pyspark",
    "pyarrow",
    "hypercorn",
    "starlette",
    "jinja2",
    "fastavro",  # the schemas extra
    "httpx",
}


def _run_demo_without(tmp_path: Path, hidden: set[str]) -> subprocess.CompletedProcess[str]:
    """``python -m trafka.tools.demo`` as if the ``hidden`` top-level packages were
    not installed: a sitecustomize puts a copy of site-packages without them
    (symbolic links to everything else) in its place on ``sys.path``, so importing
    one fails and ``importlib.util.find_spec`` finds none, as on a machine without
    them. trafka itself comes from the editable install's finder, loaded before."""
    site_packages = next(Path(p) for p in sys.path if p.endswith("site-packages"))
    view = tmp_path / "site-packages"
    view.mkdir()
    for entry in site_packages.iterdir():
        top = entry.name.split("-")[0].split(".")[0]
        if top not in hidden:
            (view / entry.name).symlink_to(entry)
    boot = tmp_path / "boot"
    boot.mkdir()
    (boot / "sitecustomize.py").write_text(
        "import sys\n"
        f"sys.path[:] = [{str(view)!r} if p == {str(site_packages)!r} else p for p in sys.path]\n"
    )
    probe = "import importlib.util as u; print([m for m in {names!r} if u.find_spec(m)])"
    env = {**os.environ, "PYTHONPATH": str(boot)}
    seen = subprocess.run(
        [sys.executable, "-c", probe.format(names=sorted(hidden))],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert seen.stdout.strip() == "[]", f"still importable: {seen.stdout}{seen.stderr}"
    return subprocess.run(
        [sys.executable, "-m", "trafka.tools.demo"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=230,
        check=False,
    )


def _skipped(stdout: str) -> dict[str, str]:
    """The demo's ``skipped: STEP (WHY)`` lines, by step."""
    found = re.findall(r"^skipped: (.+?) \((.+)\)$", stdout, re.MULTILINE)
    steps = [step for step, _ in found]
    assert len(steps) == len(set(steps)), f"a step said twice: {steps}"
    return dict(found)


@pytest.mark.timeout(240)
def test_demo_on_a_plain_install(tmp_path: Path) -> None:
    """Without any peer or extra the demo runs what trafka alone can and exits 0,
    saying in one line each which steps it skipped and why."""
    proc = _run_demo_without(tmp_path, NOT_IN_A_PLAIN_INSTALL)
    report = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, report
    assert "Traceback" not in proc.stderr, report
    assert proc.stdout.rstrip().endswith("demo: ok"), report
    assert "FAILED" not in proc.stdout, report
    assert _skipped(proc.stdout) == {
        "the confluent-kafka service": "confluent_kafka is not installed: pip install confluent-kafka",
        "the console": "the console needs hypercorn, starlette, jinja2: pip install 'trafka[console]'",
        "Spark": "pyspark is not installed: pip install 'trafka[spark]'",
        "the kafka-python read": "kafka-python is not installed: pip install kafka-python",
        "the schema registry step": ("fastavro is not installed: pip install 'trafka[schemas]'"),
    }
    # What needs nothing else still ran, and was checked.
    for step in (
        "services: 600 orders from trafka's SDK (murmur2)",
        "checked: all 600 orders in the topic",
        "billing: the 'billing' group read all 600 orders through the proxy",
        "ok: each order consumed exactly once",
        "ok: each order accepted exactly once by the share group",
        "== 3. The broker's responses, encoded and decoded back",
    ):
        assert step in proc.stdout, step


@pytest.mark.timeout(240)
def test_demo_with_kafka_python_but_not_lz4(tmp_path: Path) -> None:
    """kafka-python cannot read the pipeline's lz4 batches without the lz4 package
    (it raised UnsupportedCodecError): the read is skipped, saying so. (PySpark is
    hidden too, only to keep the test short.)"""
    proc = _run_demo_without(tmp_path, {"lz4", "pyspark"})
    report = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, report
    assert "UnsupportedCodecError" not in proc.stdout + proc.stderr, report
    assert proc.stdout.rstrip().endswith("demo: ok"), report
    assert _skipped(proc.stdout) == {
        "the kafka-python read": (
            "kafka-python reads lz4 batches only with the lz4 package: pip install lz4"
        ),
        "Spark": "pyspark is not installed: pip install 'trafka[spark]'",
    }
    assert "from confluent-kafka (CRC32)" in proc.stdout, report  # the peers present ran
    assert "console: http://127.0.0.1:" in proc.stdout, report


def test_a_full_install_skips_no_demo_step() -> None:
    """Where the suite runs (``pip install -e '.[dev]'`` and ``make system-deps``, the
    install `make demo` ran in), the demo finds every peer it looks for, so `make demo`
    ran each of its steps rather than skipping one with exit status 0. The peers are
    those a plain install lacks (every one of the demo's ``skipped:`` lines is asserted
    by test_demo_on_a_plain_install), Java for Spark, and lz4 for kafka-python's read."""
    import importlib.util

    from trafka.console.server import missing_dependencies
    from trafka.tools._peers import java_missing, kafka_python_missing

    assert [m for m in sorted(NOT_IN_A_PLAIN_INSTALL) if importlib.util.find_spec(m) is None] == []
    assert java_missing() is None
    assert kafka_python_missing() is None
    assert missing_dependencies() is None
