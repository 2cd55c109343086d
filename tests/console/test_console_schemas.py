"""The console with a Schema Registry: brokerlite serving both (its own registry
given to its console), records framed by confluent-kafka's AvroSerializer,
the pages fetched over HTTP.

Confluent's wire format (magic byte 0, the 4-byte schema id, the payload) is
what the frames are; the compatibility levels (global BACKWARD by default, a
subject's own once set) are those of Confluent's Schema Registry API.
"""

from __future__ import annotations

import html
import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer as CkProducer
from confluent_kafka.schema_registry import Schema as CkSchema
from confluent_kafka.schema_registry import SchemaRegistryClient as CkRegistry
from confluent_kafka.schema_registry.avro import AvroSerializer as CkAvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from console_helpers import Site, cells, get, record_parts
from unique_names import names as _names

from trafka.brokerlite import RunningBroker, broker_in_thread

pytestmark = pytest.mark.timeout(120)

USER = {
    "type": "record",
    "name": "User",
    "namespace": "console.people",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
}
USER_V2 = {**USER, "fields": [*USER["fields"], {"name": "nick", "type": "string", "default": ""}]}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Site, RunningBroker]]:
    with broker_in_thread(
        data_dir=tmp_path_factory.mktemp("console-schemas"),
        port=0,
        host="127.0.0.1",
        console_listen="127.0.0.1:0",
        schema_registry_listen="127.0.0.1:0",
        num_partitions=1,
        startup_timeout=120,
    ) as running:
        assert running.console_address is not None
        host, port = running.console_address
        yield Site(f"http://{host}:{port}", running.bootstrap_servers), running


@pytest.fixture(scope="module")
def ck_registry(served: tuple[Site, RunningBroker]) -> CkRegistry:
    address = served[1].schema_registry_address
    assert address is not None
    return CkRegistry({"url": f"http://{address[0]}:{address[1]}"})


@pytest.mark.compat(
    "Schema Registry", "console: decoded messages, search over decoded fields, subjects pages"
)
def test_messages_decoded_searched_and_subjects(
    served: tuple[Site, RunningBroker], ck_registry: CkRegistry
) -> None:
    """Framed values show as their decoded JSON with the schema's type, id and
    subject; plain bytes as before; a frame whose id the registry does not know
    as bytes, saying why; a search matches the decoded fields (a JSON path);
    the subjects pages list versions and levels and diff two versions."""
    site, broker = served
    topic = f"people-{next(_names)}"
    ctx = SerializationContext(topic, MessageField.VALUE)
    framed = CkAvroSerializer(ck_registry, json.dumps(USER))({"name": "ada", "age": 36}, ctx)
    schema_id = int.from_bytes(framed[1:5], "big")
    unknown = b"\x00" + (424242).to_bytes(4, "big") + framed[5:]
    producer = CkProducer({"bootstrap.servers": broker.bootstrap_servers})
    for value in (framed, b"plain text", unknown):
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0

    page = get(site, f"/topics/{topic}/messages?start=beginning")
    assert page.status == 200
    parts = record_parts(page.text)
    assert len(parts) == 3, parts
    decoded, plain, not_decoded = (full for _, full in parts)
    assert f"AVRO, schema id {schema_id}, subject {topic}-value" in decoded
    assert json.loads(decoded.split(f"{topic}-value", 1)[1]) == {"name": "ada", "age": 36}
    assert "plain text" in plain and "schema id" not in plain
    assert "not decoded" in not_decoded and "424242" in not_decoded
    assert "00 00 06 79 32" in not_decoded  # shown as its bytes (hex)

    def search(q: str) -> str:
        query = urllib.parse.urlencode({"q": q, "mode": "jsonpath"})
        return get(site, f"/topics/{topic}/search?{query}").text

    found = search("$.name == ada")
    rows = cells(found, "matches")
    assert len(rows) == 1 and '"name": "ada"' in html.unescape(" ".join(rows[0]))
    assert cells(search("$.name == bob"), "matches") == [["No match in the records looked at."]]

    subject = f"{topic}-value"
    ck_registry.register_schema(subject, CkSchema(json.dumps(USER_V2), "AVRO"))
    listing = get(site, "/schemas")
    assert "BACKWARD" in html.unescape(listing.text.split('id="global-level">', 1)[1][:20])
    assert [subject, "1, 2", "BACKWARD (global)"] in cells(listing.text, "subjects")
    ck_registry.set_compatibility(subject, "NONE")
    assert [subject, "1, 2", "NONE"] in cells(get(site, "/schemas").text, "subjects")
    one = get(site, f"/schemas/{subject}?a=1&b=2")
    assert one.status == 200
    diff = html.unescape(one.text.split('<pre id="diff">', 1)[1].split("</pre>", 1)[0])
    assert "--- version 1" in diff and "+++ version 2" in diff
    assert [line for line in diff.splitlines() if line.startswith("+") and "nick" in line]
    assert cells(one.text, "versions")[0][:2] == ["1", str(schema_id)]
    gone = get(site, "/schemas/no-such-subject")
    assert gone.status == 404 and "not found" in gone.text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _console_log(served: tuple[Site, RunningBroker], *flags: str) -> str:
    """``trafka console`` with the broker's registry, given ``flags``, asked a
    subject the registry does not have (its normal 404); its stderr once stopped."""
    site, broker = served
    assert broker.schema_registry_address is not None
    host, registry_port = broker.schema_registry_address
    port = _free_port()
    command = [
        "console", "-b", site.bootstrap, "--listen", f"127.0.0.1:{port}",
        "--schema-registry", f"http://{host}:{registry_port}", *flags,
    ]  # fmt: skip
    return _served_log(command, site._replace(base=f"http://127.0.0.1:{port}"))


def _served_log(command: list[str], there: Site) -> str:
    """``trafka`` ``command`` (serving a console at ``there``), asked a subject
    the registry does not have (its normal 404); its stderr once stopped."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cli = [sys.executable, "-m", "trafka.tools.cli"]
    proc = subprocess.Popen([*cli, *command], stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                page = get(there, "/schemas/no-such-subject")
                break
            except OSError:
                assert proc.poll() is None, "the console exited"
                assert time.monotonic() < deadline, "the console did not come up"
                time.sleep(0.2)
        assert page.status == 404 and "not found" in page.text
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    return err.decode()


def test_the_registrys_answers_are_not_logged_unless_verbose(
    served: tuple[Site, RunningBroker],
) -> None:
    """httpx logs each request at INFO (``HTTP Request: GET ... 404 Not Found``):
    the console holds it at WARNING unless ``-v`` asks for everything."""
    quiet = _console_log(served)
    assert "trafka console on http://" in quiet, quiet
    assert "HTTP Request" not in quiet and "httpx" not in quiet, quiet
    verbose = _console_log(served, "-v")
    assert "httpx: HTTP Request: GET http://" in verbose and "404 Not Found" in verbose, verbose


def test_a_broker_serving_the_console_and_registry_does_not_log_their_requests(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """``trafka broker --console-listen --schema-registry-listen``: the console
    asks the broker's registry over HTTP, and httpx's line per request is kept
    quiet there too."""
    port, console, registry = _free_port(), _free_port(), _free_port()
    command = [
        "broker", "--listen", f"127.0.0.1:{port}", "--no-announce",
        "--data-dir", str(tmp_path_factory.mktemp("broker-console-log")),
        "--console-listen", f"127.0.0.1:{console}",
        "--schema-registry-listen", f"127.0.0.1:{registry}",
    ]  # fmt: skip
    said = _served_log(command, Site(f"http://127.0.0.1:{console}", f"127.0.0.1:{port}"))
    assert f"schema registry on http://127.0.0.1:{registry}/" in said, said
    assert "HTTP Request" not in said and "httpx" not in said, said
