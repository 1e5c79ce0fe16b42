"""`trio-agents trace view`: the page's data, its safety, and the page itself in a real browser."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from browser import NO_BROWSER, open_browser
from trace_factory import (
    AgentSpec,
    run_events,
    small_run,
    wide_deep,
    write_trace,
)

from runtime.cli._trace_cmd import main
from runtime.trace._view import PageBuilder, data_json, render_page

CLI = Path(sys.executable).parent / "trio-agents"
DOCS = Path(__file__).resolve().parent.parent / "docs"
EVIL = '</script><script>window.pwned = 1</script><img src=x onerror="window.pwned = 2"> & <!--'


def page_data(path: Path) -> dict[str, Any]:
    builder = PageBuilder()
    with path.open("rb") as f:
        builder.feed_all(f)
    builder.end()
    return builder.data()


def embedded(page: bytes) -> dict[str, Any]:
    match = re.search(
        rb'<script type="application/json" id="trace-data">(.*?)</script>', page, re.S
    )
    assert match is not None
    return orjson.loads(match.group(1))  # type: ignore[no-any-return]


@pytest.fixture
def small(tmp_path: Path) -> Path:
    path = tmp_path / "run.jsonl"
    write_trace(path, run_events(small_run(), order="time"))
    return path


def evil_run() -> Iterator[dict[str, Any]]:
    """small_run whose model text, prompt, tool input and output all try to break out as HTML."""
    for event in run_events(small_run(), order="time"):
        if event["type"] in ("text_delta", "user_message"):
            event["text"] = EVIL
        elif event["type"] == "agent_started":
            event["prompt"] = EVIL
        elif event["type"] == "tool_started":
            event["input"] = {"command": EVIL}
            event["summary"] = f"bash: {EVIL}"
        elif event["type"] == "tool_finished":
            event["output"] = EVIL
        elif event["type"] == "agent_finished" and event["result"] is not None:
            event["result"] = EVIL
        yield event


# ---------------------------------------------------------------------------- data and page


def test_every_node_is_in_the_data_with_its_parent_and_times(small: Path) -> None:
    data = page_data(small)
    (run,) = data["runs"]
    nodes = run["nodes"]
    by_id = {n["id"]: n for n in nodes}
    assert {n["name"] for n in nodes if n["k"] == "agent"} == {"main", "worker", "sleeper", "flaky"}
    sleeper = next(n for n in nodes if n["name"] == "sleeper")
    call = nodes[sleeper["p"]]
    assert call["k"] == "tool"
    assert call["name"] == "agent"
    assert call["cancel"] == {"by": "user", "reason": "taking too long"}
    assert sleeper["status"] == "cancelled"
    assert nodes[call["p"]]["name"] == "main"
    main_agent = by_id["agent_1"]
    assert main_agent["t0"] == 0
    assert main_agent["tin"] == run["input_tokens"] > main_agent["in"]
    assert [m[2] for m in main_agent["model_calls"]] == ["ok", "ok", "ok"]
    # A model call ends at its turn_finished; the next starts once the turn's tools are done.
    first, second, _ = main_agent["model_calls"]
    assert first[0] == 0
    assert first[1] == pytest.approx(0.1)
    assert second[0] == pytest.approx(max(n["t1"] for n in nodes if n["p"] == 0 and n["t0"] < 0.2))


def test_deltas_of_one_stream_are_one_event_row(small: Path) -> None:
    (run,) = page_data(small)["runs"]
    worker = next(n for n in run["nodes"] if n["name"] == "worker")
    kinds = [row[2] for row in worker["events"]]
    assert kinds == [
        "agent_started",
        "text_delta",
        "turn_finished",
        "text_delta",
        "turn_finished",
        "agent_finished",
    ]
    delta = worker["events"][1]
    assert delta[4] == 3  # the three deltas of turn 1
    assert delta[3].startswith("the repository")


def test_a_subtree_cost_adds_up_the_agents_below(tmp_path: Path) -> None:
    events = list(run_events(small_run(), order="time"))
    for event in events:
        if event["type"] == "agent_finished":
            event["cost_usd"] = 0.25
    path = tmp_path / "cost.jsonl"
    write_trace(path, events)
    (run,) = page_data(path)["runs"]
    main_agent = run["nodes"][0]
    assert main_agent["cost"] == pytest.approx(0.25)
    assert main_agent["scost"] == pytest.approx(1.0)  # main and its three sub-agents
    assert run["cost_usd"] == pytest.approx(1.0)


def test_no_text_can_close_the_data_element(tmp_path: Path) -> None:
    path = tmp_path / "evil.jsonl"
    write_trace(path, evil_run())
    page = render_page(page_data(path))
    assert page.count(b"</script>") == 2  # the data element's and the script's own
    data = embedded(page)
    texts = [n.get("result") for n in data["runs"][0]["nodes"]]
    assert EVIL in texts
    assert data_json({"x": "</script>"}) == b'{"x":"\\u003c/script\\u003e"}'


def test_the_page_loads_nothing_from_elsewhere(small: Path) -> None:
    page = render_page(page_data(small)).decode()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "Content-Security-Policy" in page
    assert "default-src 'none'" in page
    nonce = re.search(r"script-src 'nonce-([^']+)'", page)
    assert nonce is not None
    assert f'<script nonce="{nonce.group(1)}">' in page


def test_trace_view_writes_the_page_beside_the_trace(
    small: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["view", str(small)]) == 0
    page = small.with_suffix(".html")
    assert page.read_bytes().startswith(b"<!doctype html>")
    err = capsys.readouterr().err
    assert f"wrote {page}" in err
    assert page.resolve().as_uri() in err


def test_trace_view_to_stdout_and_to_a_named_file(
    small: Path, tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    assert main(["view", str(small), "-o", "-"]) == 0
    out = capsysbinary.readouterr().out
    assert embedded(out)["runs"][0]["run_id"] == "run_0001"
    target = tmp_path / "page.html"
    assert main(["view", str(small), "-o", str(target)]) == 0
    assert embedded(target.read_bytes())["runs"][0]["agents"] == 4


def test_trace_view_of_a_missing_file_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["view", str(tmp_path / "nope.jsonl")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "no such file" in err[0]


def test_trace_view_to_a_folder_that_does_not_exist_fails_before_reading(
    small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["view", str(small), "-o", str(tmp_path / "no" / "page.html")]) == 2
    assert "-o" in capsys.readouterr().err


def test_an_unfinished_trace_shows_interrupted_nodes(tmp_path: Path) -> None:
    events = list(run_events(small_run(), order="time"))
    path = tmp_path / "cut.jsonl"
    write_trace(path, events[: len(events) // 2])
    (run,) = page_data(path)["runs"]
    statuses = {n["status"] for n in run["nodes"]}
    assert "interrupted" in statuses
    assert all(n["t1"] is not None for n in run["nodes"])


def big_spec() -> AgentSpec:
    """About 1,000 agents and 100,000 events: leaves stream long answers."""
    spec = wide_deep([10, 10, 9])

    def lengthen(agent: AgentSpec) -> None:
        calls = [c for turn in agent.turns for c in turn if c.child is not None]
        if not calls:
            agent.deltas = 33
        for call in calls:
            assert call.child is not None
            lengthen(call.child)

    lengthen(spec)
    return spec


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("big") / "big.jsonl"
    lines = write_trace(path, run_events(big_spec(), order="time"))
    assert lines >= 100_000
    return path


@pytest.mark.slow  # asserts a speed
def test_a_page_of_1000_agents_is_made_in_under_5_seconds(big_trace: Path, tmp_path: Path) -> None:
    t0 = time.perf_counter()
    result = subprocess.run(
        [str(CLI), "trace", "view", str(big_trace), "-o", str(tmp_path / "big.html")],
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - t0
    assert result.returncode == 0, result.stderr
    size = (tmp_path / "big.html").stat().st_size
    events = len(big_trace.read_bytes().splitlines())
    print(f"\n1,011 agents, {events:,} events: {elapsed:.2f}s, {size / 1e6:.1f} MB")
    assert elapsed < 5


# ---------------------------------------------------------------------------- in a browser

needs_browser = pytest.mark.skipif(NO_BROWSER is not None, reason=NO_BROWSER or "")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if NO_BROWSER is not None:
        pytest.skip(NO_BROWSER)
    with open_browser() as driver:
        yield driver


@pytest.fixture(scope="module")
def demo_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The trace of a real `trio-agents demo` (about 13 s: its tester waits on purpose)."""
    folder = tmp_path_factory.mktemp("demo")
    trace = folder / "demo.jsonl"
    result = subprocess.run(
        [str(CLI), "demo", "--trace", str(trace)],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert result.returncode == 0, result.stderr
    return trace


def open_page(driver: Any, trace: Path) -> Path:
    page = trace.with_suffix(".html")
    assert main(["view", str(trace), "-o", str(page)]) == 0
    driver.get(page.resolve().as_uri())
    wait_ready(driver)
    return page


def wait_ready(driver: Any, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while driver.execute_script("return document.documentElement.dataset.ready") != "1":
        assert time.monotonic() < deadline, "the page's script never finished"
        time.sleep(0.05)


def rows(driver: Any) -> dict[str, Any]:
    from selenium.webdriver.common.by import By

    return {
        row.get_attribute("data-id"): row
        for row in driver.find_elements(By.CSS_SELECTOR, "#rows .row")
    }


@needs_browser
@pytest.mark.slow  # runs the demo (about 13 s)
def test_the_demo_page_has_a_row_and_a_bar_for_every_agent(browser: Any, demo_trace: Path) -> None:
    from selenium.webdriver.common.by import By

    open_page(browser, demo_trace)
    events = [orjson.loads(line) for line in demo_trace.read_bytes().splitlines()]
    agents = {e["agent_id"]: e["name"] for e in events if e["type"] == "agent_started"}
    tools = {e["tool_use_id"] for e in events if e["type"] == "tool_started"}
    shown = rows(browser)
    assert set(agents) | tools == set(shown)
    for agent_id, name in agents.items():
        row = shown[agent_id]
        assert row.find_element(By.CSS_SELECTOR, ".name").text == name
        bar = row.find_element(By.CSS_SELECTOR, ".timeline .bar")
        assert bar.size["width"] > 0
        assert row.find_elements(By.CSS_SELECTOR, ".bar .seg.model")  # its model calls
    # Parallel sub-agents: their bars overlap on the one time axis.
    bars = {a: shown[a].find_element(By.CSS_SELECTOR, ".bar").rect for a in agents}
    depth1 = [
        a
        for a in agents
        if next(e for e in events if e.get("agent_id") == a and e["type"] == "agent_started")[
            "depth"
        ]
        == 1
    ]
    assert len(depth1) >= 3
    lefts = [bars[a]["x"] for a in depth1]
    rights = [bars[a]["x"] + bars[a]["width"] for a in depth1]
    assert max(lefts) < min(rights)
    # What the page says about the run.
    facts = browser.find_element(By.ID, "run-facts").text
    assert f"agents {len(agents)}" in facts
    browser.save_screenshot(str(demo_trace.with_suffix(".png")))
    if os.environ.get("TRIO_AGENTS_UPDATE_SCREENSHOTS"):
        browser.find_element(
            By.CSS_SELECTOR,
            f'#rows .row[data-id="{next(iter(a for a, n in agents.items() if n == "tester"))}"]',
        ).click()
        time.sleep(0.2)
        browser.save_screenshot(str(DOCS / "trace-view.png"))


@needs_browser
@pytest.mark.slow  # runs the demo (about 13 s)
def test_a_click_on_a_row_shows_that_nodes_events(browser: Any, demo_trace: Path) -> None:
    from selenium.webdriver.common.by import By

    open_page(browser, demo_trace)
    events = [orjson.loads(line) for line in demo_trace.read_bytes().splitlines()]
    tester = next(e for e in events if e["type"] == "agent_started" and e["name"] == "tester")
    rows(browser)[tester["agent_id"]].click()
    detail = browser.find_element(By.ID, "detail")
    assert "agent tester" in detail.find_element(By.TAG_NAME, "h2").text
    kinds = [td.text for td in detail.find_elements(By.CSS_SELECTOR, "table.events td.k")]
    assert kinds[0] == "agent_started"
    assert kinds[-1] == "agent_finished"
    assert "turn_finished" in kinds
    assert tester["prompt"][:40] in detail.text
    # A tool call shows its input and output.
    bash = next(e for e in events if e["type"] == "tool_started" and e["name"] == "bash")
    rows(browser)[bash["tool_use_id"]].click()
    pres = [p.text for p in detail.find_elements(By.TAG_NAME, "pre")]
    assert any(bash["input"]["command"] in p for p in pres)
    assert "tool_finished" in [
        td.text for td in detail.find_elements(By.CSS_SELECTOR, "table.events td.k")
    ]


@needs_browser
def test_model_text_with_script_tags_stays_text(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    path = tmp_path / "evil.jsonl"
    write_trace(path, evil_run())
    open_page(browser, path)
    assert browser.execute_script("return window.pwned") is None
    assert browser.find_elements(By.CSS_SELECTOR, "#detail img, #rows img") == []
    rows(browser)["agent_1"].click()
    texts = [
        p.get_attribute("textContent")
        for p in browser.find_elements(By.CSS_SELECTOR, "#detail pre")
    ]
    assert EVIL in texts  # the result, as text
    assert any(EVIL in t for t in texts)  # and the streamed text
    rows(browser)["toolu_1.4"].click()  # the denied write, whose output and input are EVIL
    texts = [
        p.get_attribute("textContent")
        for p in browser.find_elements(By.CSS_SELECTOR, "#detail pre")
    ]
    assert EVIL in texts
    assert browser.execute_script("return window.pwned") is None


@needs_browser
def test_search_and_status_filter_keep_matches_and_their_ancestors(
    browser: Any, small: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    open_page(browser, small)
    assert len(rows(browser)) == 11  # 4 agents, 7 tool calls
    Select(browser.find_element(By.ID, "status-filter")).select_by_value("failed")
    assert set(rows(browser)) == {"agent_1", "toolu_1.3", "agent_1.3"}
    Select(browser.find_element(By.ID, "status-filter")).select_by_value("")
    search = browser.find_element(By.ID, "search")
    search.send_keys("sleeper")
    time.sleep(0.3)  # the search waits for typing to pause
    assert set(rows(browser)) == {"agent_1", "toolu_1.2", "agent_1.2"}
    assert browser.find_element(By.ID, "match-count").text == "2 matches"  # the call, its agent
    search.clear()
    search.send_keys("x")
    search.clear()
    time.sleep(0.3)
    browser.find_element(By.ID, "agents-only").click()
    assert set(rows(browser)) == {"agent_1", "agent_1.1", "agent_1.2", "agent_1.3"}


@needs_browser
def test_collapsing_a_node_hides_its_subtree(browser: Any, small: Path) -> None:
    from selenium.webdriver.common.by import By

    open_page(browser, small)
    rows(browser)["agent_1.2"].find_element(By.CSS_SELECTOR, ".toggle").click()
    assert "toolu_1.2.1" not in rows(browser)
    rows(browser)["agent_1.2"].find_element(By.CSS_SELECTOR, ".toggle").click()
    assert "toolu_1.2.1" in rows(browser)


@needs_browser
@pytest.mark.slow  # a 100,000-event trace, timed
def test_a_1000_agent_page_loads_and_scrolls_in_a_few_seconds(
    browser: Any, big_trace: Path
) -> None:
    page = big_trace.with_suffix(".html")
    assert main(["view", str(big_trace), "-o", str(page)]) == 0
    t0 = time.perf_counter()
    browser.get(page.resolve().as_uri())
    wait_ready(browser, timeout=30)
    loaded = time.perf_counter() - t0
    shown = rows(browser)
    assert 0 < len(shown) < 200  # virtualised: only the rows in view (and a margin) exist
    total = browser.execute_script("return document.getElementById('spacer').offsetHeight / 24")
    (run,) = embedded(page.read_bytes())["runs"]
    assert run["agents"] == 1011
    assert total == len(run["nodes"]) == run["agents"] + run["tool_calls"]  # a row for every node
    # Jumps through the whole list, timed inside the page (the scroll handler draws at once).
    jumps = browser.execute_script(
        "const v = document.getElementById('viewport'); const out = [];"
        "for (const f of [0.25, 0.5, 0.75, 1.0]) {"
        "  const t = performance.now(); v.scrollTop = v.scrollHeight * f;"
        "  v.dispatchEvent(new Event('scroll'));"
        "  out.push([performance.now() - t, document.querySelectorAll('#rows .row').length]); }"
        "return out;"
    )
    scrolled = sum(ms for ms, _ in jumps) / 1000
    print(f"\nloaded in {loaded:.2f}s, four jumps drawn in {scrolled * 1000:.0f} ms")
    assert all(0 < count < 200 for _, count in jumps)  # rows are drawn wherever we are
    assert loaded < 5
    assert scrolled < 1
