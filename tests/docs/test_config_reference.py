"""docs/configuration.md is what ``trafka.tools.config_reference`` makes of the
SDK's config definitions, and it names every setting, alias and refused key.

``python -m trafka.tools.config_reference --check`` must pass on the
repository; the check mode itself is exercised on copies in a temporary folder
(never the real page: other people work in the tree). The page is then read
back as a reader would: each component's section must hold a row for every
field of its dataclass with the field's default, taken from the dataclass.
The ValueSpec each coercion carries (what the page says a setting takes) is
checked against what the coercion really accepts and refuses.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from trafka.sdk.config import (
    AdminConfig,
    ClientConfig,
    ConsumerConfig,
    ProducerConfig,
    ShareConsumerConfig,
)
from trafka.sdk.config.keys import _NOT_FOR_SHARE_GROUPS, _NOT_TAKEN
from trafka.sdk.config.values import _field, _int, value_spec
from trafka.sdk.errors import ConfigError
from trafka.tools import config_reference

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
SECTIONS = {
    ClientConfig: "All components",
    ProducerConfig: "Producer",
    ConsumerConfig: "Consumer",
    ShareConsumerConfig: "Share consumer",
    AdminConfig: "Admin",
}
COMPONENTS = (ProducerConfig, ConsumerConfig, ShareConsumerConfig, AdminConfig)


def dotted(f: dataclasses.Field[Any]) -> str:
    return f.metadata.get("dotted") or f.name.replace("_", ".")


def sections(text: str) -> dict[str, str]:
    """The page's ``## `` sections by title."""
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return {title.strip(): body for title, body in zip(parts[1::2], parts[2::2], strict=True)}


ITEM = re.compile(
    r"^- \*\*`(?P<kafka>[^`]+)`\*\* · `(?P<python>[^`]+)`: (?P<description>.*)\n"
    r"    - \*\*Default\*\* (?P<default>.*?) · \*\*Type\*\* (?P<type>.*?) · "
    r"\*\*Takes\*\* (?P<takes>.*)\n"
    r"    - \*\*Java\*\* (?P<java>.*?) · \*\*librdkafka\*\* (?P<librdkafka>.*)$",
    re.MULTILINE,
)


def rows(section: str) -> dict[str, dict[str, str]]:
    """A section's settings, each a dict of its parts, by Kafka name."""
    return {m["kafka"]: m.groupdict() for m in ITEM.finditer(section)}


def table(section: str) -> dict[str, list[str]]:
    """A section's table: the cells after the first of each row, by the first."""
    out = {}
    for line in section.splitlines():
        match = re.fullmatch(r"\| `([^`]+)` \| (.*) \|", line)
        if match:
            out[match[1]] = match[2].split(" | ")
    return out


def shown(value: Any) -> str:
    """How a default reads on the page."""
    if value == ():
        return "(none)"
    if isinstance(value, tuple):
        return "`" + ",".join(value) + "`"
    if value == "":
        return "(empty)"
    return f"`{value}`"


@pytest.fixture(scope="module")
def page() -> dict[str, str]:
    return sections(PAGE.read_text())


def test_page_is_fresh() -> None:
    assert config_reference.main(["--check"]) == 0


@pytest.mark.timeout(60)
def test_check_mode_from_the_command_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "trafka.tools.config_reference", "--check"],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_check_mode_fails_on_a_stale_or_missing_page(tmp_path: Path) -> None:
    copy = tmp_path / "configuration.md"
    assert config_reference.main(["--check", "--output", str(copy)]) == 1  # missing
    assert not copy.exists()  # check mode writes nothing
    edited = PAGE.read_text().replace("**`linger.ms`**", "**`linger.msec`**")
    assert edited != PAGE.read_text()
    copy.write_text(edited)
    assert config_reference.main(["--check", "--output", str(copy)]) == 1
    assert config_reference.main(["--output", str(copy)]) == 0  # rewritten
    assert copy.read_text() == PAGE.read_text()
    assert config_reference.main(["--check", "--output", str(copy)]) == 0


@pytest.mark.parametrize("cls", COMPONENTS, ids=lambda c: c.__name__)
def test_every_field_appears_with_its_default(page: dict[str, str], cls: type) -> None:
    """Each field is in its component's section, or in "All components" when
    the component takes it from ClientConfig unchanged; with the default the
    dataclass gives (a component that changes a default has its own row)."""
    common = {f.name: f for f in dataclasses.fields(ClientConfig)}
    own = rows(page[SECTIONS[cls]])
    shared = rows(page[SECTIONS[ClientConfig]])
    for f in dataclasses.fields(cls):
        inherited = f.name in common and f.default == common[f.name].default
        table = shared if inherited else own
        assert dotted(f) in table, f"{cls.__name__}.{f.name} is missing from the page"
        item = table[dotted(f)]
        assert item["python"] == f.name
        assert item["default"] == shown(f.default), f"{cls.__name__}.{f.name}"
        assert item["description"].strip(), f"{cls.__name__}.{f.name} has no description"


def test_the_page_fails_without_a_setting(page: dict[str, str]) -> None:
    """What the test above reads really breaks when a row goes."""
    section = page[SECTIONS[ProducerConfig]]
    assert "linger.ms" in rows(section)
    assert "linger.ms" not in rows(
        "\n".join(line for line in section.splitlines() if "**`linger.ms`**" not in line)
    )


def test_every_alias_appears_in_its_settings_row(page: dict[str, str]) -> None:
    tables = {title: rows(page[title]) for title in SECTIONS.values()}
    seen = 0
    for cls, title in SECTIONS.items():
        fields = (
            dataclasses.fields(cls) if cls is ClientConfig else config_reference.own_fields(cls)
        )
        for f in fields:
            row = " ".join(tables[title][dotted(f)].values())
            for alias in f.metadata.get("aliases", ()):
                assert f"`{alias}`" in row, f"{alias} ({f.name})"
                seen += 1
    assert seen >= 15


def test_every_refused_name_appears(page: dict[str, str]) -> None:
    refused = table(page["Other clients' settings trafka does not take"])
    assert set(_NOT_TAKEN) <= set(refused)
    for name, why in _NOT_TAKEN.items():
        assert refused[name] == [why]
    share = page[SECTIONS[ShareConsumerConfig]]
    consumer = {f.name: dotted(f) for f in dataclasses.fields(ConsumerConfig)}
    for name in _NOT_FOR_SHARE_GROUPS:
        assert f"| `{consumer[name]}` | `{name}` |" in share


def test_secrets_show_their_default_only(page: dict[str, str]) -> None:
    shared = rows(page[SECTIONS[ClientConfig]])
    secrets = [f for f in dataclasses.fields(ClientConfig) if not f.repr]
    assert {f.name for f in secrets} >= {"sasl_password", "ssl_password"}
    for f in secrets:
        assert f.default is None
        assert shared[dotted(f)]["default"] == "`None`"
    hidden = dataclasses.field(default="hunter2", repr=False, metadata=secrets[0].metadata)
    assert config_reference.format_default(hidden) == "(hidden)"


def all_fields() -> list[dataclasses.Field[Any]]:
    seen: dict[tuple[str, int], dataclasses.Field[Any]] = {}
    for cls in (ClientConfig, *COMPONENTS):
        for f in dataclasses.fields(cls):
            seen[(f.name, id(f.metadata["coerce"]))] = f
    return list(seen.values())


@pytest.mark.parametrize("f", all_fields(), ids=lambda f: f.name)
def test_value_spec_says_what_the_coercion_takes(f: dataclasses.Field[Any]) -> None:
    """The bounds and choices on the page are the ones the code enforces."""
    coerce = f.metadata["coerce"]
    spec = value_spec(coerce)
    name = dotted(f)
    if spec.optional:
        assert coerce(name, None) is None
    for choice in spec.choices:  # each taken, as the page spells it
        got = coerce(name, choice)
        got = got[0] if isinstance(got, tuple) else got  # a list setting: a list of one
        assert str(got).lower() == choice.lower(), (choice, got)
    for spelling in spec.also:
        coerce(name, spelling)
    if spec.choices:
        with pytest.raises(ConfigError):
            coerce(name, "surely-not-a-choice")
    if spec.type == "integer" and not spec.choices:
        for bound in (spec.minimum, spec.maximum):
            if bound is not None:
                assert coerce(name, bound) == bound
                assert coerce(name, str(bound)) == bound  # as from a properties file
        if spec.minimum is not None:
            with pytest.raises(ConfigError):
                coerce(name, spec.minimum - 1)
        if spec.maximum is not None:
            with pytest.raises(ConfigError):
                coerce(name, spec.maximum + 1)
    if spec.type == "boolean":
        with pytest.raises(ConfigError):
            coerce(name, "maybe")


def test_units_come_from_the_name_or_the_spec(page: dict[str, str]) -> None:
    producer = rows(page[SECTIONS[ProducerConfig]])
    assert producer["linger.ms"]["type"] == "integer, milliseconds"
    assert producer["batch.size"]["type"] == "integer, bytes"  # from _int(..., unit="bytes")
    assert producer["acks"]["type"] == "integer"
    assert rows(page[SECTIONS[ConsumerConfig]])["fetch.max.bytes"]["type"] == "integer, bytes"


def test_other_clients_names(page: dict[str, str]) -> None:
    shared = rows(page[SECTIONS[ClientConfig]])
    assert shared["ssl.check.hostname"]["java"] == "`ssl.endpoint.identification.algorithm`"
    assert shared["client.rack"]["java"] == "`client.rack` (consumer)"
    assert shared["sasl.username"]["java"] == "-"
    assert (
        shared["bootstrap.servers"]["librdkafka"] == "`bootstrap.servers`, `metadata.broker.list`"
    )
    consumer = rows(page[SECTIONS[ConsumerConfig]])
    assert consumer["enable.auto.offset.store"]["java"] == "-"
    assert consumer["enable.auto.offset.store"]["librdkafka"] == "`enable.auto.offset.store`"
    assert consumer["fetch.max.wait.ms"]["librdkafka"] == "`fetch.wait.max.ms`"
    sessions = consumer["enable.incremental.fetch.sessions"]
    assert (sessions["java"], sessions["librdkafka"]) == ("-", "-")


def test_attribute_docs_reads_the_google_section() -> None:
    class Documented:
        """Summary.

        Attributes:
            alpha: the first,
                on two lines.
            beta / gamma: shared
                text.
            delta:
                text on the next line.

        Raises:
            Nothing: not an attribute.
        """

    assert config_reference.attribute_docs(Documented) == {
        "alpha": "the first, on two lines.",
        "beta": "shared text.",
        "gamma": "shared text.",
        "delta": "text on the next line.",
    }


def test_markdown_of_roles_and_literals() -> None:
    md = config_reference.markdown
    assert md("see :mod:`trafka.discovery`") == "see `trafka.discovery`"
    assert md(":meth:`~trafka.sdk.Producer.send`") == "`send()`"
    assert md(":class:`the producer <trafka.sdk.Producer>`") == "`the producer`"
    assert md("``a|b``") == "`a\\|b`"


def test_a_setting_without_a_description_is_an_error() -> None:
    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class Undocumented(ClientConfig):
        """Settings with an undocumented one.

        Attributes:
            documented: it is.
        """

        documented: int = _field(1, _int(0))
        extra: int = _field(1, _int(0))

    component = config_reference.Component("Test", Undocumented, ("producer",), "")
    docs = config_reference.descriptions(Undocumented)
    fields = {f.name: f for f in config_reference.own_fields(Undocumented)}
    assert set(fields) == {"documented", "extra"}
    assert "`documented`" in config_reference.entry(fields["documented"], component, docs)
    with pytest.raises(ValueError, match="extra has no description"):
        config_reference.entry(fields["extra"], component, docs)
