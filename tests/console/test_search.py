"""Message search: its rules without I/O (:mod:`trafka.console.search`: the
form, regular expressions refused for their shape, JSON paths, matching a
record, the order of reading), then over HTTP against the module's brokerlite
(matches newest first, the scan limit, and going on from where a page
stopped)."""

from __future__ import annotations

import re

import pytest
from console_helpers import Site, cells, create_topics, get, run

from trafka.console import search
from trafka.console.model import InputError
from trafka.sdk import NewTopic, open_producer

pytestmark = pytest.mark.timeout(120)


def query(**form: str) -> search.SearchQuery:
    return search.parse_search_query("t", form)


def test_search_form_defaults_and_refusals() -> None:
    q = query(q="needle")
    assert (q.target, q.mode, q.partition, q.scan_limit, q.max_results, q.before) == (
        "value",
        "substring",
        None,
        10_000,
        50,
        {},
    )
    q = query(q="x", **{"in": "header"}, header="trace", partition="2", before="0:5,2:9")
    assert (q.target, q.header, q.partition, q.before) == ("header", "trace", 2, {0: 5, 2: 9})
    assert query(q="x", **{"in": "key"}, header="ignored").header is None
    for form, says in (
        ({"q": " "}, "q: give what to look for"),
        ({"q": "x", "in": "body"}, "in must be one of value, key, header"),
        ({"q": "x", "mode": "glob"}, "mode must be one of substring, regex, jsonpath"),
        ({"q": "x", "limit": "2000000"}, "limit must be at most 1,000,000"),
        ({"q": "x", "max": "501"}, "max must be at most 500"),
        ({"q": "x", "before": "0-5"}, "before must be partition:offset pairs"),
        ({"q": "(", "mode": "regex"}, "q: not a regular expression"),
        ({"q": "user.id", "mode": "jsonpath"}, "a JSON path starts with \\$"),
        ({"q": "$.a..b", "mode": "jsonpath"}, "cannot read from"),
    ):
        with pytest.raises(InputError, match=says):
            search.parse_search_query("t", form)


@pytest.mark.parametrize(
    "pattern",
    ["(a+)+$", "(a|aa)*b", "((a+))+", "(x+x+)+y", "(.*a){12}", r"(a)\1", "(?P<x>a)(?P=x)"],
)
def test_regexes_that_can_take_exponential_time_are_refused(pattern: str) -> None:
    with pytest.raises(InputError, match=r"exponential time|backreferences"):
        search.check_regex(pattern)


@pytest.mark.parametrize(
    "pattern",
    ["order-\\d+", "(ab)+", "[(a+)+]", "(?:foo)?bar", "(a+)?", "^[a-z]+@(x|y)\\.com$", "a{2,3}"],
)
def test_ordinary_regexes_pass(pattern: str) -> None:
    assert search.check_regex(pattern).pattern == pattern


def test_json_paths() -> None:
    doc = b'{"user": {"id": 42, "tags": ["a", "b"]}, "items": [{"sku": "x1"}, {"sku": "y2"}], "a b": [7]}'

    def hit(pattern: str, data: bytes | None = doc) -> bool:
        return search.matcher(query(q=pattern, mode="jsonpath"))(data)

    assert hit("$.user.id") and hit("$.user.id == 42") and not hit("$.user.id == 43")
    assert not hit('$.user.id == "42"')  # a JSON string is not the number
    assert hit("$.items[*].sku == y2") and hit('$.items[1].sku == "y2"')
    assert not hit("$.items[2].sku") and not hit("$.nobody")
    assert hit('$["a b"][0] == 7') and hit("$.user.tags[*] == b") and hit("$.*.id == 42")
    assert hit("$") and not hit("$", b"not json") and not hit("$", None)


def test_matching_a_record() -> None:
    headers = [("trace", b"abc-123"), ("origin", b"batch")]

    def hit(key: bytes | None = b"order-7", **form: str) -> bool:
        q = query(**form)
        return search.record_matches(q, search.matcher(q), key, b'{"state": "paid"}', headers)

    assert hit(q="paid") and not hit(q="PAID")  # substrings are case-sensitive
    assert hit(q="order-7", **{"in": "key"}) and not hit(None, q="order", **{"in": "key"})
    assert hit(q="^order-\\d$", mode="regex", **{"in": "key"})
    assert hit(q="123", **{"in": "header"}) and hit(q="123", **{"in": "header"}, header="trace")
    assert not hit(q="123", **{"in": "header"}, header="origin")
    assert hit(q='$.state == "paid"', mode="jsonpath")
    assert search.matcher(query(q="é"))("café".encode())  # the typed text, as UTF-8


def test_reading_goes_backwards_in_turns() -> None:
    lows, uppers = {0: 0, 1: 10, 2: 5}, {0: 100, 1: 12, 2: 5}
    assert search.next_chunks(uppers, lows, budget=1000, chunk=40) == {0: (60, 100), 1: (10, 12)}
    assert search.next_chunks(uppers, lows, budget=10, chunk=40) == {0: (95, 100), 1: (10, 12)}
    assert search.next_chunks(uppers, lows, budget=1, chunk=40) == {0: (99, 100), 1: (11, 12)}
    assert search.next_chunks({0: 0}, {0: 0}, budget=10) == {}
    assert search.next_chunks(uppers, lows, budget=0) == {}
    assert search.format_before({2: 5, 0: 60}) == "0:60,2:5"


# -- over HTTP --------------------------------------------------------------------------------


def seed(site: Site, topic: str, partitions: int, count: int) -> None:
    """``count`` records, round-robin over the partitions, each a JSON value
    with its number, key ``key-N`` and a header ``n`` (odd or even)."""
    create_topics(site, NewTopic(topic, partitions))

    async def go() -> None:
        async with open_producer(bootstrap_servers=site.bootstrap) as producer:
            for i in range(count):
                await producer.send(
                    topic,
                    b'{"n": %d, "kind": "%s"}' % (i, b"odd" if i % 2 else b"even"),
                    key=b"key-%d" % i,
                    partition=i % partitions,
                    headers=[("parity", b"odd" if i % 2 else b"even")],
                )

    run(go)


def values(page_text: str) -> list[int]:
    return [int(re.search(r'"n": (\d+)', r[4]).group(1)) for r in cells(page_text, "matches")]  # type: ignore[union-attr]


def test_search_finds_newest_first(site: Site) -> None:
    seed(site, "searched", 3, 30)
    base = "/topics/searched/search?"
    page = get(site, base + "q=odd")
    assert page.status == 200
    found = values(page.text)
    assert sorted(found) == [i for i in range(30) if i % 2]
    # Newest first: by timestamp, then partition and offset (records sent in
    # one millisecond have one timestamp).
    rows = cells(page.text, "matches")
    order = [(r[2], int(r[0]), int(r[1])) for r in rows]
    assert order == sorted(order, reverse=True)
    assert 'id="all-read"' in page.text and '<b id="scanned">30</b>' in page.text

    by_key = get(site, base + "q=^key-2%5Cd$&in=key&mode=regex")
    assert sorted(values(by_key.text)) == list(range(20, 30))
    by_path = get(site, base + "q=%24.n+%3D%3D+7&mode=jsonpath")
    assert values(by_path.text) == [7]
    by_header = get(site, base + "q=even&in=header&header=parity&partition=1")
    assert values(by_header.text) == [28, 22, 16, 10, 4]  # partition 1 holds 1, 4, 7...
    none = get(site, base + "q=nothing-like-this")
    assert cells(none.text, "matches") == [["No match in the records looked at."]]
    refused = get(site, base + "q=(a%2B)%2B&mode=regex")
    assert refused.status == 400 and "exponential time" in refused.text


def test_scan_limit_and_going_on(site: Site) -> None:
    seed(site, "long-log", 1, 40)
    page = get(site, "/topics/long-log/search?q=kind&limit=15")
    assert values(page.text) == list(range(39, 24, -1))  # the newest 15 looked at
    assert '<b id="scanned">15</b>' in page.text and "15 of 40 in the topic (38%)" in page.text
    assert [r for r in cells(page.text, "search-progress")] == [["0", "0", "25"]]
    go_on = re.search(r'<a id="go-on" href="\?([^"]+)">Search the 25 older records</a>', page.text)
    assert go_on
    more = get(site, "/topics/long-log/search?" + go_on.group(1).replace("&amp;", "&"))
    assert values(more.text) == list(range(24, 9, -1))
    assert "30 of 40 in the topic (75%)" in more.text
    # At most `max` matches: the search stops there, and can go on.
    few = get(site, "/topics/long-log/search?q=odd&max=3")
    assert values(few.text) == [39, 37, 35] and 'id="go-on"' in few.text
    go_on = re.search(r'<a id="go-on" href="\?([^"]+)">', few.text)
    assert go_on
    after = get(site, "/topics/long-log/search?" + go_on.group(1).replace("&amp;", "&"))
    assert values(after.text) == [33, 31, 29]  # none skipped, none twice
