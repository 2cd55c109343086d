"""`trafka decode` and the `trafka` group: stream splitting, error recovery, output."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import uuid
from typing import Any

import click
import pytest
from click.testing import CliRunner

from trafka.codec import protocol
from trafka.codec.compression import Compression
from trafka.codec.legacy import encode_message_set
from trafka.codec.messages import k00_produce as produce
from trafka.codec.messages import k01_fetch as fetch
from trafka.codec.messages import k03_metadata as metadata
from trafka.codec.messages import k18_api_versions as api_versions
from trafka.codec.records import encode_batch, encode_control_batch
from trafka.tools.cli import LazyGroup, main
from trafka.tools.decode import (
    HexDecoder,
    StreamDecoder,
    decode_frame,
    decode_stream,
    format_json,
    to_json,
)

TS = 1_700_000_000_000
RECORDS = [
    (TS, b"k1", b"v1", [("h", b"x")]),
    (TS + 1, None, b"v2", []),
    (TS + 2, b"k3", None, [("trace", None)]),
]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def header(key: int, version: int, corr: int) -> protocol.RequestHeader:
    return protocol.RequestHeader(
        request_api_key=key, request_api_version=version, correlation_id=corr, client_id="t"
    )


def metadata_frame(corr: int, topic: str = "orders", version: int = 12) -> bytes:
    body = metadata.MetadataRequest(
        topics=[metadata.MetadataRequest.MetadataRequestTopic(name=topic)]
    )
    return protocol.encode_request(header(3, version, corr), body)


def produce_frame(corr: int, records: bytes | None) -> bytes:
    body = produce.ProduceRequest(
        acks=1,
        timeout_ms=1000,
        topic_data=[
            produce.ProduceRequest.TopicProduceData(
                name="orders",
                partition_data=[
                    produce.ProduceRequest.PartitionProduceData(index=0, records=records)
                ],
            )
        ],
    )
    return protocol.encode_request(header(0, 9, corr), body)


def api_versions_frame(corr: int) -> bytes:
    body = api_versions.ApiVersionsRequest(client_software_name="t", client_software_version="1")
    return protocol.encode_request(header(18, 3, corr), body)


def corrupt_topic_name(frame: bytes) -> bytes:
    """Make the compact length of the topic name 'orders' claim 126 bytes."""
    at = frame.index(b"\x07orders")
    return frame[:at] + b"\x7f" + frame[at + 1 :]


def fetch_response_frame(corr: int, records: bytes | None) -> bytes:
    body = fetch.FetchResponse(
        responses=[
            fetch.FetchResponse.FetchableTopicResponse(
                topic="orders",
                partitions=[
                    fetch.FetchResponse.PartitionData(
                        partition_index=0, high_watermark=3, records=records
                    )
                ],
            )
        ]
    )
    return protocol.encode_response(corr, 1, 12, body)


def lines(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines() if line.strip()]


# -- the stream decoder, without a subprocess ---------------------------------------------


def test_corrupt_frame_in_the_middle_is_reported_and_decoding_continues() -> None:
    stream = (
        api_versions_frame(1)
        + produce_frame(2, encode_batch(RECORDS))
        + corrupt_topic_name(metadata_frame(3))
        + metadata_frame(4, "payments")
    )
    results = list(decode_stream(stream))
    assert [r["frame"] for r in results] == [0, 1, 2, 3]
    assert results[0]["api_name"] == "ApiVersions"
    assert results[1]["api_name"] == "Produce"
    bad = results[2]
    assert "body" not in bad
    assert bad["field"] == "topics[0].name"
    assert "MetadataRequest v12" in bad["error"]
    assert "topics[0].name" in bad["error"]
    assert bad["correlation_id"] == 3
    assert bad["offset"] == len(api_versions_frame(1)) + len(
        produce_frame(2, encode_batch(RECORDS))
    )
    assert results[3]["header"]["correlation_id"] == 4
    assert results[3]["body"]["topics"][0]["name"] == "payments"


def test_request_json_shape() -> None:
    (result,) = decode_stream(metadata_frame(7, version=12))
    assert result == {
        "frame": 0,
        "api_key": 3,
        "api_name": "Metadata",
        "api_version": 12,
        "header": {
            "request_api_key": 3,
            "request_api_version": 12,
            "correlation_id": 7,
            "client_id": "t",
        },
        "body": {
            "topics": [{"topic_id": "00000000-0000-0000-0000-000000000000", "name": "orders"}],
            "allow_auto_topic_creation": True,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
    }


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.LZ4, Compression.ZSTD])
def test_records_are_expanded(compression: Compression) -> None:
    batch = encode_batch(
        RECORDS, compression=compression, producer_id=5, producer_epoch=1, base_sequence=0
    )
    (result,) = decode_stream(produce_frame(1, batch))
    (entry,) = result["body"]["topic_data"][0]["partition_data"][0]["records"]
    assert entry["magic"] == 2
    assert entry["compression"] == compression.name.lower()
    assert entry["records_count"] == 3
    assert entry["producer_id"] == 5
    assert entry["base_sequence"] == 0
    assert entry["batch_length"] == len(batch) - 12
    assert entry["is_control"] is False
    assert entry["records"] == [
        {"offset": 0, "timestamp": TS, "key": b64(b"k1"), "value": b64(b"v1"),
         "headers": [{"key": "h", "value": b64(b"x")}]},
        {"offset": 1, "timestamp": TS + 1, "key": None, "value": b64(b"v2"), "headers": []},
        {"offset": 2, "timestamp": TS + 2, "key": b64(b"k3"), "value": None,
         "headers": [{"key": "trace", "value": None}]},
    ]  # fmt: skip


def test_null_and_multiple_batches_and_control_records() -> None:
    (null_result,) = decode_stream(produce_frame(1, None))
    assert null_result["body"]["topic_data"][0]["partition_data"][0]["records"] is None

    blob = encode_batch(RECORDS[:1]) + encode_control_batch(
        1, producer_id=9, producer_epoch=0, coordinator_epoch=4, timestamp=TS, base_offset=1
    )
    (result,) = decode_stream(produce_frame(2, blob))
    entries = result["body"]["topic_data"][0]["partition_data"][0]["records"]
    assert [e["base_offset"] for e in entries] == [0, 1]
    assert entries[1]["is_control"] is True
    assert entries[1]["records"][0]["control"] == {
        "type": "COMMIT",
        "version": 0,
        "coordinator_epoch": 4,
    }


def test_legacy_message_sets_are_expanded() -> None:
    blob = encode_message_set([(TS, b"k", b"legacy", ())], magic=1)
    (result,) = decode_stream(produce_frame(1, blob))
    (entry,) = result["body"]["topic_data"][0]["partition_data"][0]["records"]
    assert entry["magic"] == 1
    assert entry["records"][0]["value"] == b64(b"legacy")
    assert entry["records"][0]["key"] == b64(b"k")


def test_bad_batch_crc_fails_the_frame_naming_the_batch() -> None:
    good = encode_batch(RECORDS[:1])
    bad = bytearray(encode_batch(RECORDS))
    bad[-1] ^= 0xFF
    stream = produce_frame(1, good + bytes(bad)) + metadata_frame(2)
    first, second = decode_stream(stream)
    assert first["field"] == "topic_data[0].partition_data[0].records[1].crc"
    assert first["error"].startswith(
        "ProduceRequest v9, field topic_data[0].partition_data[0].records[1].crc"
    )
    assert "CRC mismatch" in first["error"]
    assert f"at byte {len(good)}" in first["error"]
    assert second["api_name"] == "Metadata"


def test_bad_record_inside_a_batch_names_the_record() -> None:
    batch = bytearray(encode_batch(RECORDS, compression=Compression.NONE))
    # Lie about the first record's key length, then fix the CRC so only the record is wrong.
    from trafka.codec.crc import crc32c

    first_record = 61
    key_len_at = first_record + 4  # length, attributes, timestamp delta, offset delta
    assert batch[key_len_at] == 4  # zig-zag of 2
    batch[key_len_at] = 0x20  # claims 16 bytes
    batch[17:21] = crc32c(bytes(batch[21:])).to_bytes(4, "big")
    (result,) = decode_stream(produce_frame(1, bytes(batch)))
    assert result["field"] == "topic_data[0].partition_data[0].records[0].records[0].key"


def test_unknown_api_and_unsupported_version_are_skipped() -> None:
    unknown = protocol.encode_request(header(3, 12, 1), metadata.MetadataRequest())
    unknown = unknown[:4] + (9999).to_bytes(2, "big") + unknown[6:]
    too_new = metadata_frame(2)
    too_new = too_new[:6] + (999).to_bytes(2, "big") + too_new[8:]
    results = list(decode_stream(unknown + too_new + metadata_frame(3)))
    assert "unknown API key 9999" in results[0]["error"]
    assert results[0]["api_key"] == 9999
    assert "v999 is not supported" in results[1]["error"]
    assert results[2]["header"]["correlation_id"] == 3


def test_broken_size_prefix_ends_the_stream() -> None:
    stream = metadata_frame(1) + b"\xff\xff\xff\xfe" + metadata_frame(2)
    results = list(decode_stream(stream))
    assert len(results) == 2
    assert results[0]["api_name"] == "Metadata"
    assert results[1]["frame"] == 1
    assert "negative frame size -2" in results[1]["error"]
    assert results[1]["offset"] == len(metadata_frame(1))


def test_too_large_frame_ends_the_stream() -> None:
    frame = metadata_frame(1)
    results = list(decode_stream(frame + frame, max_frame_size=len(frame) - 5))
    assert len(results) == 1
    assert "exceeds the maximum" in results[0]["error"]


def test_stream_ending_inside_a_frame() -> None:
    frame = metadata_frame(1)
    results = list(decode_stream(frame + frame[:-3]))
    assert results[0]["api_name"] == "Metadata"
    assert results[1]["frame"] == 1
    assert "stream ended inside a frame" in results[1]["error"]


def test_one_byte_at_a_time_gives_the_same_results() -> None:
    stream = (
        metadata_frame(1)
        + corrupt_topic_name(metadata_frame(2))
        + produce_frame(3, encode_batch(RECORDS, compression=Compression.LZ4))
    )
    whole = list(decode_stream(stream))
    decoder = StreamDecoder()
    pieces = [r for i in range(len(stream)) for r in decoder.feed(stream[i : i + 1])]
    pieces += list(decoder.close())
    assert pieces == whole
    assert (decoder.frames, decoder.errors) == (3, 1)


def test_hex_decoder() -> None:
    frame = metadata_frame(5)
    text = frame.hex(" ", 2).upper() + "\n"
    hexer = HexDecoder()
    out = b"".join(hexer.feed(text[i : i + 3].encode()) for i in range(0, len(text), 3))
    hexer.close()
    assert out == frame

    results = list(decode_stream([text[:7].encode(), text[7:].encode()], hex_input=True))
    assert results[0]["header"]["correlation_id"] == 5

    results = list(decode_stream(frame.hex().encode() + b" 0q", hex_input=True))
    assert results[0]["api_name"] == "Metadata"
    assert "invalid hex character 'q'" in results[1]["error"]

    results = list(decode_stream(frame.hex().encode() + b"0", hex_input=True))
    assert "odd number of hex digits" in results[1]["error"]


def test_responses_mode_with_a_partial_trailing_batch() -> None:
    batch = encode_batch(RECORDS)
    results = list(
        decode_stream(
            fetch_response_frame(10, batch + batch[:30]) + fetch_response_frame(11, None),
            responses=(1, 12),
        )
    )
    assert [r["header"] for r in results] == [{"correlation_id": 10}, {"correlation_id": 11}]
    assert results[0]["api_name"] == "Fetch"
    entries = results[0]["body"]["responses"][0]["partitions"][0]["records"]
    assert len(entries) == 2
    assert [r["offset"] for r in entries[0]["records"]] == [0, 1, 2]
    assert entries[1] == {"partial_batch_bytes": 30}


def test_to_json_conversions() -> None:
    topic_id = uuid.UUID("12345678-1234-5678-1234-567812345678")
    value = metadata.MetadataRequest.MetadataRequestTopic(
        topic_id=topic_id, name=None, unknown_tagged_fields=[(7, b"\x01\x02")]
    )
    assert to_json(value) == {
        "topic_id": str(topic_id),
        "name": None,
        "unknown_tagged_fields": [{"tag": 7, "data": b64(b"\x01\x02")}],
    }
    assert to_json([b"\x00\xff", float("nan"), float("-inf"), 1.5]) == [
        "AP8=",
        "NaN",
        "-Infinity",
        1.5,
    ]
    with pytest.raises(TypeError, match=r"at \[0\]"):
        to_json([object()])


def test_decode_frame_never_raises_on_garbage() -> None:
    for frame in (b"", b"\x00", b"\x00\x03\x00\x0c\x00\x00\x00\x01\xff", bytes(range(40))):
        result = decode_frame(frame)
        assert "error" in result
    assert "error" in decode_frame(b"\x00", responses=(0, 9))


def test_format_json_round_trips_and_wraps() -> None:
    value = {"a": [1, 2, {"b": "x" * 50}], "c": {"d": None}, "e": []}
    text = format_json(value, width=40)
    assert json.loads(text) == value
    # Only a scalar too long by itself may overflow the width.
    assert [line.strip() for line in text.splitlines() if len(line) > 40] == [f'"b": "{"x" * 50}"']
    assert "\n" in text
    assert format_json(value, width=200) == json.dumps(value)


# -- the command -------------------------------------------------------------------------


def test_cli_exit_status_and_lines(tmp_path: Any) -> None:
    path = tmp_path / "capture.bin"
    path.write_bytes(metadata_frame(1) + corrupt_topic_name(metadata_frame(2)) + metadata_frame(3))
    result = CliRunner().invoke(main, ["decode", str(path)])
    assert result.exit_code == 1
    out = lines(result.output)
    assert [o["frame"] for o in out] == [0, 1, 2]
    assert out[1]["field"] == "topics[0].name"

    path.write_bytes(metadata_frame(1))
    result = CliRunner().invoke(main, ["decode", str(path)])
    assert result.exit_code == 0
    assert lines(result.output)[0]["api_name"] == "Metadata"


def test_cli_hex_from_stdin() -> None:
    text = "\n".join(metadata_frame(1).hex(" ", 1) for _ in range(2))
    result = CliRunner().invoke(main, ["decode", "--hex", "-"], input=text)
    assert result.exit_code == 0, result.output
    assert [o["frame"] for o in lines(result.output)] == [0, 1]


def test_cli_responses() -> None:
    frames = fetch_response_frame(1, encode_batch(RECORDS)) + fetch_response_frame(2, None)
    for key in ("1", "Fetch", "fetch"):
        result = CliRunner().invoke(
            main, ["decode", "--responses", "--api-key", key, "--api-version", "12"], input=frames
        )
        assert result.exit_code == 0, result.output
        out = lines(result.output)
        assert [o["header"]["correlation_id"] for o in out] == [1, 2]
        assert out[0]["body"]["responses"][0]["partitions"][0]["records"][0]["records_count"] == 3


@pytest.mark.parametrize(
    "args",
    [
        ["--responses", "--api-key", "1"],
        ["--responses", "--api-key", "NoSuchApi", "--api-version", "1"],
        ["--responses", "--api-key", "1", "--api-version", "999"],
        ["--api-key", "1"],
    ],
)
def test_cli_usage_errors(args: list[str]) -> None:
    result = CliRunner().invoke(main, ["decode", *args], input=b"")
    assert result.exit_code == 2
    assert "Error" in result.output


@pytest.mark.timeout(60)
def test_cli_in_a_subprocess_reads_stdin() -> None:
    stream = metadata_frame(1) + corrupt_topic_name(metadata_frame(2)) + metadata_frame(3)
    proc = subprocess.run(
        [sys.executable, "-m", "trafka.tools.cli", "decode"],
        input=stream,
        capture_output=True,
        timeout=50,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    out = lines(proc.stdout.decode())
    assert [("error" in o) for o in out] == [False, True, False]


# -- the lazy group ----------------------------------------------------------------------


def make_group() -> click.Group:
    @click.group(
        cls=LazyGroup,
        lazy_subcommands={
            "decode": "trafka.tools.decode:command",
            "missing": "trafka.no_such_module:command",
            "notacommand": "trafka.tools.decode:decode_stream",
        },
    )
    def group() -> None:
        """Test group."""

    return group


def test_help_lists_every_subcommand_and_marks_broken_ones() -> None:
    result = CliRunner().invoke(make_group(), ["--help"])
    assert result.exit_code == 0
    by_name = {
        line.split()[0]: line for line in result.output.splitlines() if line.startswith("  ")
    }
    assert "Decode Kafka frames" in by_name["decode"]
    assert "unavailable" in by_name["missing"]
    assert "unavailable" in by_name["notacommand"]


def test_broken_subcommand_fails_alone() -> None:
    group = make_group()
    result = CliRunner().invoke(group, ["missing", "--anything"])
    assert result.exit_code == 1
    assert "trafka.no_such_module" in result.output
    result = CliRunner().invoke(group, ["decode"], input=metadata_frame(1))
    assert result.exit_code == 0
    assert lines(result.output)[0]["api_name"] == "Metadata"


def test_main_group_version_and_commands() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output.startswith("trafka, version ")
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for name in ("decode", "demo", "broker"):
        assert f"  {name} " in result.output
