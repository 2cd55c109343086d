"""BrokerConfig (Python and Kafka names, properties files) and the ``trafka broker`` command."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from trafka.brokerlite.cli import build_config, command
from trafka.brokerlite.config import BrokerConfig, ConfigError
from trafka.brokerlite.storage.topic_configs import LogConfig


def test_defaults_are_kafkas() -> None:
    config = BrokerConfig()
    assert (config.host, config.port) == ("127.0.0.1", 9092)
    assert config.data_dir == Path("trafka-data")
    assert (config.node_id, config.num_partitions, config.auto_create_topics) == (1, 1, True)
    assert config.log_segment_bytes == 1_073_741_824
    assert config.log_retention_ms == 7 * 24 * 3600 * 1000
    assert config.message_max_bytes == 1_048_588
    assert config.group_initial_rebalance_delay_ms == 3000
    assert config.socket_request_max_bytes == 100 * 1024 * 1024


def test_kafka_and_python_names_mix() -> None:
    config = BrokerConfig.from_mapping(
        {
            "log.segment.bytes": "1048576",
            "num.partitions": "3",
            "auto.create.topics.enable": "false",
            "log.dirs": "/tmp/a,/tmp/b",
            "broker.id": "7",
            "listeners": "PLAINTEXT://0.0.0.0:19092",
            "advertised.listeners": "PLAINTEXT://kafka.local:29092",
            "log.flush.interval.messages": "1000",
            "group_initial_rebalance_delay_ms": 0,
            "message_max_bytes": 2_000_000,
        }
    )
    assert config.log_segment_bytes == 1_048_576
    assert config.num_partitions == 3
    assert config.auto_create_topics is False
    assert config.data_dir == Path("/tmp/a")
    assert config.node_id == 7
    assert (config.host, config.port) == ("0.0.0.0", 19092)
    assert config.advertised_address(("0.0.0.0", 19092)) == ("kafka.local", 29092)
    assert config.flush_interval_messages == 1000
    assert config.group_initial_rebalance_delay_ms == 0
    assert config.message_max_bytes == 2_000_000


def test_unknown_keys_name_the_closest_known_one() -> None:
    with pytest.raises(ConfigError, match=r"'log\.segment\.byte'.*'log\.segment\.bytes'"):
        BrokerConfig.from_mapping({"log.segment.byte": "1"})
    with pytest.raises(ConfigError, match=r"'num_partition'.*'num_partitions'"):
        BrokerConfig().with_overrides({"num_partition": 2})
    with pytest.raises(ConfigError, match=r"unknown broker setting 'zzzz'$"):
        BrokerConfig.from_mapping({"zzzz": "1"})


def test_bad_values_are_errors() -> None:
    with pytest.raises(ConfigError, match=r"num\.partitions"):
        BrokerConfig.from_mapping({"num.partitions": "many"})
    with pytest.raises(ConfigError, match="num_partitions"):
        BrokerConfig.from_mapping({"num.partitions": "0"})
    with pytest.raises(ConfigError, match=r"auto\.create\.topics\.enable"):
        BrokerConfig.from_mapping({"auto.create.topics.enable": "perhaps"})
    with pytest.raises(ConfigError, match="HOST:PORT"):
        BrokerConfig.from_mapping({"listen": "nowhere"})


def test_retention_units_follow_kafkas_precedence() -> None:
    hours = BrokerConfig.from_mapping({"log.retention.hours": "2"})
    assert hours.log_retention_ms == 2 * 3_600_000
    both = BrokerConfig.from_mapping({"log.retention.ms": "5", "log.retention.hours": "2"})
    assert both.log_retention_ms == 5
    minutes = BrokerConfig.from_mapping({"log.retention.hours": "2", "log.retention.minutes": "3"})
    assert minutes.log_retention_ms == 3 * 60_000
    # -1 means "forever" whatever the unit.
    assert BrokerConfig.from_mapping({"log.retention.hours": "-1"}).log_retention_ms == -1


def test_properties_file(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "# a stock KRaft file, trimmed\n"
        "process.roles=broker,controller\n"
        "node.id=3\n"
        "controller.quorum.voters=1@localhost:9093\n"
        "listeners=PLAINTEXT://127.0.0.1:0\n"
        "num.network.threads=3\n"
        "log.dirs=" + str(tmp_path / "logs") + "\n"
        "num.partitions = 6\n"
        "log.retention.hours: 1\n"
        "log.segment.bytes=\\\n"
        "    2097152\n"
        "! another comment\n"
        "group.initial.rebalance.delay.ms=0\n"
    )
    config = BrokerConfig.from_properties(path)
    assert config.node_id == 3
    assert config.port == 0
    assert config.data_dir == tmp_path / "logs"
    assert config.num_partitions == 6
    assert config.log_retention_ms == 3_600_000
    assert config.log_segment_bytes == 2_097_152
    assert config.group_initial_rebalance_delay_ms == 0
    path.write_text("log.segmnt.bytes=1\n")
    with pytest.raises(ConfigError, match=r"log\.segment\.bytes"):
        BrokerConfig.from_properties(path)


def test_log_cleaner_settings(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "log.cleanup.policy=compact, delete\n"
        "log.cleaner.min.cleanable.ratio=0.25\n"
        "log.cleaner.delete.retention.ms=1000\n"
        "log.cleaner.max.compaction.lag.ms=60000\n"
        "log.cleaner.backoff.ms=500\n"
        "log.cleaner.enable=false\n"
        "log.cleaner.threads=4\n"  # Kafka's thread count: accepted, meaningless here
    )
    config = BrokerConfig.from_properties(path)
    assert not config.log_cleaner_enable
    assert config.log_cleaner_backoff_ms == 500
    # The topic defaults every new topic starts from.
    log_config = LogConfig(**config.as_log_config_kwargs())
    assert log_config.compact and log_config.cleanup_policy == "compact,delete"
    assert (log_config.min_cleanable_dirty_ratio, log_config.delete_retention_ms) == (0.25, 1000)
    assert log_config.max_compaction_lag_ms == 60_000
    for bad in (
        {"log.cleanup.policy": "shred"},
        {"log.cleaner.min.cleanable.ratio": "1.5"},
        {"log.cleaner.min.cleanable.ratio": "half"},
        {"log.cleaner.backoff.ms": "0"},
    ):
        with pytest.raises(ConfigError):
            BrokerConfig().with_overrides(bad)


def test_cli_options_override_the_file(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=6\nlog.retention.ms=1000\n")
    config = build_config(path, {"num_partitions": 2, "listen": "127.0.0.1:1234"})
    assert (config.num_partitions, config.log_retention_ms, config.port) == (2, 1000, 1234)
    assert build_config(path, {"max_partitions": 8}).partition_limit() == 8
    # Neither the command nor the library announces itself unless asked.
    assert build_config(None, {}) == BrokerConfig()
    assert BrokerConfig().announce is False
    assert build_config(None, {"announce": True}) == BrokerConfig(announce=True)
    path.write_text("announce=true\n")
    assert build_config(path, {}).announce is True
    assert build_config(path, {"announce": False}).announce is False


def test_cli_help_and_bad_config(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(command, ["--help"])
    assert result.exit_code == 0
    for option in (
        "--listen",
        "--advertised-listener",
        "--data-dir",
        "--node-id",
        "--num-partitions",
        "--auto-create-topics / --no-auto-create-topics",
        "--log-segment-bytes",
        "--log-retention-ms",
        "--log-retention-bytes",
        "--message-max-bytes",
        "--flush-interval-messages",
        "--flush-interval-ms",
        "--config",
    ):
        assert option in result.output
    bad = tmp_path / "bad.properties"
    bad.write_text("num.partitons=3\n")
    result = runner.invoke(command, ["--config", str(bad)])
    assert result.exit_code == 2
    assert "num.partitions" in result.output


def test_protocol_version_by_every_name(tmp_path: Path) -> None:
    """Issue #37: 3.9 (the old versions too) by default, 4.0 by any spelling."""
    assert BrokerConfig().protocol_version == "3.9"
    path = tmp_path / "server.properties"
    path.write_text("trafka.protocol.version=4.0\n")
    assert BrokerConfig.from_properties(path).protocol_version == "4.0"
    assert BrokerConfig.from_mapping({"protocol": "4.0"}).protocol_version == "4.0"
    assert build_config(None, {"protocol": "4.0"}).protocol_version == "4.0"
    assert build_config(path, {"protocol": "3.9"}).protocol_version == "3.9"
    with pytest.raises(ConfigError, match=r"protocol_version: must be one of 3\.9, 4\.0"):
        BrokerConfig(protocol_version="3.0")
    result = CliRunner().invoke(command, ["--protocol", "2.8"])
    assert result.exit_code == 2
    assert "--protocol" in result.output


@pytest.mark.timeout(60)
def test_trafka_broker_serves_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    from kafka import KafkaAdminClient

    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trafka.tools.cli",
            "broker",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            str(tmp_path / "data"),
            "--num-partitions",
            "2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        ready = ""
        for line in proc.stdout:
            if "ready on" in line:
                ready = line
                break
        match = re.search(r"ready on 127\.0\.0\.1:(\d+)", ready)
        assert match, ready
        admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{match.group(1)}")
        try:
            assert admin.list_topics() == []
        finally:
            admin.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        # Not communicate(timeout=...): it reads the pipe directly, past what the
        # line iteration above already buffered.
        rest = proc.stdout.read()
        assert proc.returncode == 0, rest
        assert "shutting down" in rest and "stopped" in rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (tmp_path / "data" / "meta.properties").exists()
