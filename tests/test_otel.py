"""Live OpenTelemetry export: real runs sending spans over OTLP/HTTP to a loopback receiver that
decodes them with the official protobufs; the same spans as `trace export --format otlp-json`."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio
from otlp_receiver import Receiver, otlp_receiver, value

from runtime import open_runtime
from runtime.cli._trace_cmd import main as trace_main
from runtime.core._errors import ConfigError
from runtime.trace import _otel
from runtime.trace._otel import OtlpSettings, open_live_spans, otlp_settings

SECRET = "sk-live-0123456789abcdef"
OTLP_KEY = "otlp-ingest-key-42424242"


def agent_call(description: str, agent: str) -> dict[str, Any]:
    return {
        "name": "agent",
        "input": {"description": description, "prompt": f"do {description}", "agent": agent},
    }


SCENARIO: dict[str, Any] = {"agents": {
    "main": {"turns": [
        {"text": "Two helpers.", "tool_calls": [agent_call("reading", "reader"), agent_call("breaking", "breaker")]},
        {"text": f"Done; the key was {SECRET}"}]},
    "reader": {"tools": ["bash"], "turns": [
        {"tool_calls": [{"name": "bash", "input": {"command": "echo reading"}}]},
        {"text": "read it"}]},
    "breaker": {"tools": ["read"], "turns": [
        {"tool_calls": [{"name": "read", "input": {"path": f"missing-{SECRET}.txt"}}]},
        {"text": "it broke"}]},
}}  # fmt: skip

SLOW: dict[str, Any] = {"agents": {
    "main": {"turns": [
        {"tool_calls": [agent_call("slow part", "sleeper"), agent_call("fast part", "worker")]},
        {"text": "never reached"}]},
    "sleeper": {"tools": ["bash"], "turns": [
        {"text": "Sleeping.", "tool_calls": [{"name": "bash", "input": {"command": "sleep 30"}}]},
        {"text": "slept"}]},
    "worker": {"tools": [], "turns": [{"text": "fast done"}]},
}}  # fmt: skip


def run_env(**more: str) -> dict[str, str]:
    return {
        **os.environ,
        "MY_SERVICE_TOKEN": SECRET,
        "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer%20{OTLP_KEY}",
        "OTEL_SERVICE_NAME": "my-agents",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test,team=tools",
        **more,
    }


def span_dict(span: Any) -> dict[str, Any]:
    """A received protobuf span, normalised for comparison."""
    return {
        "name": span.name,
        "kind": span.kind,
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "parent": span.parent_span_id.hex() or None,
        "start": span.start_time_unix_nano,
        "end": span.end_time_unix_nano,
        "attributes": {a.key: value(a.value) for a in span.attributes},
        "status": (span.status.code, span.status.message or None),
        "events": [
            (e.name, e.time_unix_nano, {a.key: value(a.value) for a in e.attributes})
            for e in span.events
        ],
    }


def json_value(v: dict[str, Any]) -> Any:
    ((kind, inner),) = v.items()
    if kind == "intValue":
        return int(inner)
    if kind == "arrayValue":
        return tuple(json_value(x) for x in inner["values"])
    return inner


def json_span_dict(span: dict[str, Any]) -> dict[str, Any]:
    """A span of the OTLP JSON file format, normalised the same way."""
    attrs = lambda items: {a["key"]: json_value(a["value"]) for a in items}  # noqa: E731
    return {
        "name": span["name"],
        "kind": span["kind"],
        "trace_id": span["traceId"],
        "span_id": span["spanId"],
        "parent": span.get("parentSpanId"),
        "start": int(span["startTimeUnixNano"]),
        "end": int(span["endTimeUnixNano"]),
        "attributes": attrs(span["attributes"]),
        "status": (span["status"]["code"], span["status"].get("message")),
        "events": [
            (e["name"], int(e["timeUnixNano"]), attrs(e["attributes"]))
            for e in span.get("events", [])
        ],
    }


def offline_spans(trace: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> list[dict[str, Any]]:
    capsysbinary.readouterr()
    assert trace_main(["export", "--format", "otlp-json", str(trace)]) == 0
    out = capsysbinary.readouterr().out
    return [
        json_span_dict(span)
        for line in out.splitlines()
        for rs in orjson.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
    ]


def trace_nodes(trace: Path) -> tuple[dict[str, str], dict[str, str]]:
    events = [orjson.loads(line) for line in trace.read_bytes().splitlines()]
    agents = {e["agent_id"]: e["name"] for e in events if e["type"] == "agent_started"}
    tools = {e["tool_use_id"]: e["name"] for e in events if e["type"] == "tool_started"}
    return agents, tools


@pytest.fixture
def receiver() -> Any:
    with otlp_receiver() as r:
        yield r


async def run_scenario(
    scenario: dict[str, Any], workspace: Path, trace: Path, receiver: Receiver, **kw: Any
) -> Any:
    async with open_runtime(
        scenario=scenario, workspace=workspace, trace=trace, permission_mode="allow-all",
        env=run_env(), otlp=receiver.url, **kw,
    ) as rt:  # fmt: skip
        return await rt.run("go")


# ---------------------------------------------------------------------------- a real run


async def test_a_run_sends_one_trace_of_agent_tool_and_chat_spans_shaped_as_its_tree(
    workspace: Path, tmp_path: Path, receiver: Receiver
) -> None:
    trace = tmp_path / "run.jsonl"
    outcome = await run_scenario(SCENARIO, workspace, trace, receiver)
    assert outcome.status == "completed"
    spans = [span_dict(s) for s in receiver.spans()]
    agents, tools = trace_nodes(trace)
    names = sorted(s["name"] for s in spans)
    assert names == sorted(
        [f"invoke_agent {n}" for n in agents.values()]
        + [f"execute_tool {n}" for n in tools.values()]
        + ["chat scripted"] * 6  # two model calls for each of the three agents
    )
    assert len({s["trace_id"] for s in spans}) == 1
    by_id = {s["span_id"]: s for s in spans}
    assert len(by_id) == len(spans)
    (root,) = [s for s in spans if s["parent"] is None]
    assert root["name"] == "invoke_agent main"
    for span in spans:
        if span is not root:
            assert span["parent"] in by_id  # every parent arrived too
    # The tree: main → its agent call → the sub-agent → its bash call; chat under its agent.
    reader = next(s for s in spans if s["name"] == "invoke_agent reader")
    call = by_id[reader["parent"]]
    assert call["name"] == "execute_tool agent"
    assert by_id[call["parent"]] is root
    bash = next(
        s for s in spans if s["parent"] == reader["span_id"] and s["name"] == "execute_tool bash"
    )
    assert bash["attributes"]["gen_ai.tool.name"] == "bash"
    assert bash["attributes"]["gen_ai.tool.call.id"] in tools
    chats = [s for s in spans if s["parent"] == reader["span_id"] and s["name"].startswith("chat")]
    assert [c["attributes"]["trio_agents.turn"] for c in chats] == [1, 2]
    first = chats[0]["attributes"]
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.request.model"] == "scripted"
    assert first["gen_ai.agent.name"] == "reader"
    assert first["gen_ai.response.finish_reasons"] == ("tool_use",)
    assert isinstance(first["gen_ai.usage.input_tokens"], int)
    assert chats[0]["kind"] == 3  # SPAN_KIND_CLIENT: a call to the model
    assert reader["kind"] == 1
    assert root["attributes"]["gen_ai.agent.name"] == "main"
    assert root["attributes"]["gen_ai.usage.output_tokens"] > 0
    assert (
        root["attributes"]["trio_agents.usage.total_output_tokens"]
        > root["attributes"]["gen_ai.usage.output_tokens"]
    )
    # The failing read: an error status, its output masked.
    broken = next(s for s in spans if s["name"] == "execute_tool read")
    assert broken["attributes"]["trio_agents.status"] == "error"
    assert broken["status"][0] == 2
    assert broken["attributes"]["error.type"] == "error"
    assert "***" in broken["status"][1]
    # Resource from the standard variables.
    resource = receiver.resources()[0]
    assert resource["service.name"] == "my-agents"
    assert resource["deployment.environment"] == "test"
    assert resource["team"] == "tools"


async def test_no_secret_leaves_in_a_span_and_the_header_key_only_as_a_header(
    workspace: Path, tmp_path: Path, receiver: Receiver
) -> None:
    trace = tmp_path / "run.jsonl"
    await run_scenario(SCENARIO, workspace, trace, receiver)
    assert receiver.bodies
    for body in receiver.bodies:
        assert SECRET.encode() not in body
        assert OTLP_KEY.encode() not in body
    assert {h["authorization"] for h in receiver.headers} == {f"Bearer {OTLP_KEY}"}
    assert SECRET.encode() not in trace.read_bytes()


async def test_the_live_spans_are_those_of_the_offline_export(
    workspace: Path, tmp_path: Path, receiver: Receiver, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    trace = tmp_path / "run.jsonl"
    await run_scenario(SCENARIO, workspace, trace, receiver)
    live = sorted((span_dict(s) for s in receiver.spans()), key=lambda s: s["span_id"])
    offline = sorted(offline_spans(trace, capsysbinary), key=lambda s: s["span_id"])
    assert [s["name"] for s in live] == [s["name"] for s in offline]
    assert live == offline


async def test_a_cancelled_run_still_sends_a_span_for_every_node(
    workspace: Path, tmp_path: Path, receiver: Receiver, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    trace = tmp_path / "run.jsonl"
    with trio.move_on_after(1.5):  # the sleeper's bash is still sleeping
        await run_scenario(SLOW, workspace, trace, receiver)
    spans = [span_dict(s) for s in receiver.spans()]
    agents, tools = trace_nodes(trace)
    by_call_id = {s["attributes"].get("gen_ai.tool.call.id"): s for s in spans}
    by_agent_id = {
        s["attributes"]["gen_ai.agent.id"]: s for s in spans if s["name"].startswith("invoke_agent")
    }
    assert set(by_agent_id) == set(agents)
    assert set(tools) <= set(by_call_id)
    sleeper = next(
        s for s in by_agent_id.values() if s["attributes"]["gen_ai.agent.name"] == "sleeper"
    )
    assert sleeper["attributes"]["trio_agents.status"] == "cancelled"
    assert sleeper["status"][0] == 2
    live = sorted(spans, key=lambda s: s["span_id"])
    assert live == sorted(offline_spans(trace, capsysbinary), key=lambda s: s["span_id"])


@pytest.mark.slow  # real time: the bounded flush
async def test_a_dead_collector_costs_the_run_nothing_and_its_end_a_bounded_flush(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_otel, "FLUSH_S", 1.0)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    async with open_runtime(
        scenario=SCENARIO, workspace=workspace, trace=False, permission_mode="allow-all",
        otlp=f"http://127.0.0.1:{port}",
    ) as rt:  # fmt: skip
        outcome = await rt.run("go")
        ran = time.monotonic() - t0
    ended = time.monotonic() - t0
    assert outcome.status == "completed"
    assert ended - ran < 1.5


@pytest.mark.slow  # real time: the bounded flush
async def test_a_slow_collector_never_slows_the_run(
    workspace: Path, tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_otel, "FLUSH_S", 1.0)
    receiver.delay_s = 60  # every export request hangs
    t0 = time.monotonic()
    async with open_runtime(
        scenario=SCENARIO, workspace=workspace, trace=False, permission_mode="allow-all",
        otlp=receiver.url,
    ) as rt:  # fmt: skip
        outcome = await rt.run("go")
        ran = time.monotonic() - t0
    ended = time.monotonic() - t0
    assert outcome.status == "completed"
    assert ran < 5  # three agents, two bash calls
    assert ended - ran < 1.5


# ---------------------------------------------------------------------------- settings


def test_settings_come_from_the_standard_variables() -> None:
    assert otlp_settings({}) is None
    base = otlp_settings({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"})
    assert base == OtlpSettings(endpoint="http://collector:4318/v1/traces")
    traces = otlp_settings(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://example.test/otlp/traces",
            "OTEL_EXPORTER_OTLP_HEADERS": "a=1,b=two%20words",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "b=3",
            "OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attrs,k=v",
        }
    )
    assert traces is not None
    assert traces.endpoint == "https://example.test/otlp/traces"
    assert traces.headers == {"a": "1", "b": "3"}
    assert traces.service_name == "from-attrs"
    assert traces.resource == {"k": "v"}
    assert "headers" not in repr(traces)  # never printed by accident


def test_the_flag_wins_and_takes_a_base_or_a_full_url() -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://other:4318", "OTEL_SDK_DISABLED": "true"}
    assert otlp_settings(env) is None  # disabled, unless asked for by name
    assert otlp_settings(env, "http://localhost:4318").endpoint == "http://localhost:4318/v1/traces"  # type: ignore[union-attr]
    assert (
        otlp_settings(env, "http://localhost:6006/v1/traces").endpoint
        == "http://localhost:6006/v1/traces"
    )  # type: ignore[union-attr]


def test_a_bad_url_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="--otlp: not an http"):
        otlp_settings({}, "localhost:4318")
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_ENDPOINT: not an http"):
        otlp_settings({"OTEL_EXPORTER_OTLP_ENDPOINT": "grpc://x"})


def test_without_the_sdk_a_flag_is_an_error_and_the_variables_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_otel, "sdk_missing", lambda: "the OpenTelemetry SDK is not installed")
    with pytest.raises(ConfigError, match="--otlp http://x:1: the OpenTelemetry SDK"):
        open_live_spans("http://x:1", {}, version="0")
    said: list[str] = []
    assert (
        open_live_spans(
            None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:1"}, version="0", warn=said.append
        )
        is None
    )
    assert len(said) == 1
    assert "no spans are sent" in said[0]
    assert (
        open_live_spans(False, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:1"}, version="0") is None
    )


def test_the_otlp_header_variables_are_secrets() -> None:
    from runtime.core._secrets import looks_secret, secret_values

    assert looks_secret("OTEL_EXPORTER_OTLP_HEADERS")
    assert looks_secret("OTEL_EXPORTER_OTLP_TRACES_HEADERS")
    values = secret_values({"OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer {OTLP_KEY},x=1"})
    assert OTLP_KEY in values


def test_help_does_not_import_the_sdk() -> None:
    code = (
        "import sys\n"
        "from runtime.cli._main import main\n"
        "try:\n    main(['run', '--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "--otlp URL" in out
    assert out.strip().endswith("[]")


# ---------------------------------------------------------------------------- the command line


def test_run_otlp_sends_the_runs_spans(tmp_path: Path, receiver: Receiver) -> None:
    scenario = tmp_path / "s.json"
    scenario.write_bytes(orjson.dumps(SCENARIO))
    (tmp_path / "ws").mkdir()
    result = subprocess.run(
        [str(Path(sys.executable).parent / "trio-agents"), "run", "go", "--scenario", str(scenario),
         "--workspace", str(tmp_path / "ws"), "--permission-mode", "allow-all",
         "--trace", str(tmp_path / "t.jsonl"), "--otlp", receiver.url],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    names = {s.name for s in receiver.spans()}
    assert {
        "invoke_agent main",
        "invoke_agent reader",
        "execute_tool agent",
        "chat scripted",
    } <= names


def test_run_with_a_bad_otlp_url_is_one_error_line(tmp_path: Path) -> None:
    scenario = tmp_path / "s.json"
    scenario.write_bytes(orjson.dumps(SCENARIO))
    result = subprocess.run(
        [str(Path(sys.executable).parent / "trio-agents"), "run", "go", "--scenario", str(scenario),
         "--no-trace", "--otlp", "localhost:4318"],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "trio-agents: error: --otlp: not an http(s) URL: 'localhost:4318'"
    ]


# ---------------------------------------------------------------------------- trace context


async def test_model_calls_over_http_carry_the_traceparent_of_their_chat_span(
    receiver: Receiver, tmp_path: Path, nursery: trio.Nursery
) -> None:
    from tests.llm_server import LLMServer
    from tests.test_provider_e2e import KEY, _openai_route

    server = LLMServer()
    await nursery.start(server.serve)
    server.route = _openai_route
    env = {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": server.url + "/v1", "PATH": "/usr/bin:/bin"}
    with trio.fail_after(30):
        async with open_runtime(
            "openai", model="m", env=env, workspace=tmp_path, trace=False, otlp=receiver.url
        ) as rt:
            outcome = await rt.run("split the work")
    assert outcome.status == "completed"
    sent = [r.headers["traceparent"] for r in server.requests]
    assert len(sent) == 4  # main twice, each sub-agent once
    parents = {tuple(t.split("-")[1:3]) for t in sent}
    chats = {(s.trace_id.hex(), s.span_id.hex()) for s in receiver.spans() if s.name == "chat m"}
    assert parents == chats
    assert all(re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01", t) for t in sent)


async def test_without_live_spans_no_traceparent_is_sent(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    from tests.llm_server import LLMServer, Reply, openai_text_stream
    from tests.test_provider_e2e import KEY

    server = LLMServer()
    await nursery.start(server.serve)
    server.push(Reply.stream(openai_text_stream(["fine"])))
    env = {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": server.url + "/v1", "PATH": "/usr/bin:/bin"}
    with trio.fail_after(30):
        async with open_runtime(
            "openai", model="m", env=env, workspace=tmp_path, trace=False
        ) as rt:
            await rt.run("hi")
    assert "traceparent" not in server.requests[0].headers
