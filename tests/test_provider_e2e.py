"""End to end against the loopback LLM server: a main agent and two parallel sub-agents driven
by the real OpenAI and Anthropic providers, checked through the whole event stream and tree."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import trio

from runtime import AgentStarted, Event, TextDelta, ToolFinished, open_runtime
from runtime.trace._tree import TraceTree
from tests.invariants import by_type, check_invariants
from tests.llm_server import (
    OPENAI_DONE,
    LLMServer,
    RecordedRequest,
    Reply,
    anthropic_end,
    anthropic_event,
    anthropic_message_start,
    anthropic_text_block,
    anthropic_text_stream,
    openai_chunk,
    openai_text_stream,
)

KEY = "sk-e2e-secret-0123456789abcdef"
_CALLS = [
    {"description": "count the files", "prompt": "COUNT the files in the workspace", "agent": "general"},
    {"description": "read the notes", "prompt": "READ notes.txt", "agent": "general"},
]


@pytest.fixture
async def server(nursery: trio.Nursery) -> LLMServer:
    server = LLMServer()
    await nursery.start(server.serve)
    return server


def _openai_route(request: RecordedRequest) -> Reply:
    body = request.json
    messages = body["messages"]
    first_user = next(m["content"] for m in messages if m["role"] == "user")
    first_user = first_user if isinstance(first_user, str) else str(first_user)
    if "COUNT" in first_user:
        return Reply.stream(openai_text_stream(["There are ", "2 files."]))
    if "READ" in first_user:
        return Reply.stream(openai_text_stream(["The notes say ", "hi."]))
    if any(m["role"] == "tool" for m in messages):
        return Reply.stream(openai_text_stream(["Both sub-agents ", "reported back."]))
    calls = [
        {"index": i, "id": f"call_{i}", "type": "function",
         "function": {"name": "agent", "arguments": orjson.dumps(c).decode()}}
        for i, c in enumerate(_CALLS)
    ]
    return Reply.stream([
        openai_chunk({"role": "assistant", "content": "Splitting."}),
        openai_chunk({"tool_calls": calls}),
        openai_chunk({}, finish="tool_calls"),
        OPENAI_DONE,
    ])


def _anthropic_route(request: RecordedRequest) -> Reply:
    body = request.json
    messages = body["messages"]
    first = messages[0]["content"]
    first_text = first if isinstance(first, str) else " ".join(
        b.get("text", "") for b in first if isinstance(b, dict))
    if "COUNT" in first_text:
        return Reply.stream(anthropic_text_stream(["There are ", "2 files."]))
    if "READ" in first_text:
        return Reply.stream(anthropic_text_stream(["The notes say ", "hi."]))
    if len(messages) > 1:
        return Reply.stream(anthropic_text_stream(["Both sub-agents ", "reported back."]))
    events = [anthropic_message_start(), *anthropic_text_block(0, ["Splitting."])]
    for i, call in enumerate(_CALLS, start=1):
        events += [
            anthropic_event("content_block_start", index=i,
                            content_block={"type": "tool_use", "id": f"toolu_{i}",
                                           "name": "agent", "input": {}}),
            anthropic_event("content_block_delta", index=i,
                            delta={"type": "input_json_delta",
                                   "partial_json": orjson.dumps(call).decode()}),
            anthropic_event("content_block_stop", index=i),
        ]
    events += anthropic_end("tool_use")
    return Reply.stream(events)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_main_agent_with_two_parallel_sub_agents_over_http(
    provider: str, server: LLMServer, tmp_path: Path
) -> None:
    server.route = _openai_route if provider == "openai" else _anthropic_route
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {
        "OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": server.url + "/v1",
        "ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": server.url,
        "PATH": "/usr/bin:/bin",
    }
    trace = tmp_path / "run.jsonl"
    events: list[Event] = []
    with trio.fail_after(20):
        async with open_runtime(provider, model="test-model", env=env, workspace=workspace,
                                trace=trace, on_event=events.append) as rt:
            outcome = await rt.run("Review the workspace")
    check_invariants(events)
    assert (outcome.status, outcome.result) == ("completed", "Both sub-agents reported back.")
    children = [e for e in by_type(events, AgentStarted) if e.parent_tool_use_id is not None]
    assert sorted(e.prompt for e in children) == sorted(c["prompt"] for c in _CALLS)  # type: ignore[attr-defined]
    results = sorted(e.output for e in by_type(events, ToolFinished))  # type: ignore[attr-defined]
    assert results == ["The notes say hi.", "There are 2 files."]
    answers = [b.content for b in outcome.state.messages[2].content]  # type: ignore[union-attr]
    assert answers == ["There are 2 files.", "The notes say hi."], "results in call order"
    text = "".join(e.text for e in by_type(events, TextDelta) if e.agent_id == outcome.agent_id)  # type: ignore[attr-defined]
    assert text == "Splitting.Both sub-agents reported back."
    assert len(server.requests) == 4
    assert KEY not in trace.read_text()

    tree = TraceTree.from_events(events)
    [root] = tree.roots
    assert root.status == "completed"
    calls = root.children
    assert [c.name for c in calls] == ["agent", "agent"]
    assert [c.children[0].status for c in calls] == ["completed", "completed"]
    last = server.requests[-1].body.decode()
    assert "There are 2 files." in last, "the main agent's second call carries both results"
    assert "The notes say hi." in last


async def test_a_retried_model_call_is_a_provider_retry_event_on_the_agent(
    server: LLMServer, tmp_path: Path
) -> None:
    """Issue 21, item 3: a retry is an event (for --json, traces and the live tree), not a log.
    (A 429 is the endpoint's rate limit, a ``rate_limited`` event: tests/test_ratelimit_e2e.py.)"""
    from runtime import ProviderRetry
    from runtime.trace._render import render_tree

    server.push(
        Reply.error(503, f"slow down, {KEY}", kind="server_error",
                    headers=[("retry-after", "0.2")]),
        Reply.stream(openai_text_stream(["fine"])),
    )
    env = {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": server.url + "/v1", "PATH": "/usr/bin:/bin"}
    events: list[Event] = []
    tree = TraceTree()
    seen_while_waiting: list[str] = []

    def tap(event: Event) -> None:
        events.append(event)
        tree.apply(event)
        if isinstance(event, ProviderRetry):
            line = render_tree(tree, now=event.ts + 0.05, color=False)
            seen_while_waiting.extend(t.plain for t in line.renderables)  # type: ignore[attr-defined]

    with trio.fail_after(20):
        async with open_runtime("openai", model="m", env=env, workspace=tmp_path,
                                trace=tmp_path / "t.jsonl", on_event=tap) as rt:
            outcome = await rt.run("hi")
    check_invariants(events)
    assert outcome.status == "completed"
    [retry] = by_type(events, ProviderRetry)
    assert retry.agent_id == outcome.agent_id
    assert (retry.attempt, retry.delay_s) == (1, 0.2)  # type: ignore[attr-defined]
    assert "HTTP 503" in retry.reason  # type: ignore[attr-defined]
    assert KEY not in retry.reason  # type: ignore[attr-defined]
    assert any("retrying in 150ms (try 2): openai: HTTP 503" in line for line in seen_while_waiting)
    # Once the call answers, the node no longer says it is retrying.
    assert tree.roots[0].retry is None
    # A trace holding the event reads back without a warning (it is a known kind).
    reread = TraceTree()
    for line in (tmp_path / "t.jsonl").read_bytes().splitlines():
        reread.apply_dict(orjson.loads(line))


async def test_a_cut_reply_and_a_refusal_are_said_in_the_tree_and_the_summary(
    server: LLMServer, tmp_path: Path
) -> None:
    """Issue 21, items 20 and 21: an agent that completed on a cut or refused reply says so."""
    from runtime.cli._live import summary_line
    from runtime.trace._render import tree_lines

    for finish, words, note in [
        ("length", "(reply cut at max_tokens)", "1 reply cut at max_tokens"),
        ("refusal", "(refused)", "1 refusal"),
    ]:
        if finish == "refusal":
            chunks = [openai_chunk({"refusal": "I won't."}), openai_chunk({}, finish="stop")]
        else:
            chunks = [openai_chunk({"content": "The answer is"}), openai_chunk({}, finish="length")]
        server.push(Reply.stream([*chunks, OPENAI_DONE]))
        env = {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": server.url + "/v1", "PATH": "/usr/bin:/bin"}
        events: list[Event] = []
        async with open_runtime("openai", model="m", env=env, workspace=tmp_path, trace=False,
                                on_event=events.append) as rt:
            outcome = await rt.run("hi")
        assert outcome.status == "completed"
        [turn] = [e for e in events if e.type == "turn_finished"]
        assert turn.stop_reason == ("max_tokens" if finish == "length" else "refusal")  # type: ignore[attr-defined]
        if finish == "refusal":
            assert outcome.result == "I won't."
        tree = TraceTree.from_events(events)
        root_line = [t.plain for t in tree_lines(tree, color=False)][1]
        assert words in root_line
        assert summary_line(tree, rich=False).endswith(note)


def _per_response_ids_route(request: RecordedRequest) -> Reply:
    """A server that numbers the tool calls of each response from 0 (call_0 in every one), as
    some OpenAI-compatible servers do."""
    messages = request.json["messages"]
    first_user = next(m["content"] for m in messages if m["role"] == "user")
    tool_results = [m for m in messages if m["role"] == "tool"]
    if first_user.startswith("CHILD"):
        if tool_results:
            return Reply.stream(openai_text_stream([f"{first_user} saw {len(tool_results)}"]))
        call = {"index": 0, "id": "call_0", "type": "function",
                "function": {"name": "glob", "arguments": '{"pattern": "*"}'}}
        return Reply.stream([openai_chunk({"tool_calls": [call]}),
                             openai_chunk({}, finish="tool_calls"), OPENAI_DONE])
    if tool_results:
        return Reply.stream(openai_text_stream(["all ", str(len(tool_results))]))
    calls = [
        {"index": i, "id": f"call_{i}", "type": "function",
         "function": {"name": "agent", "arguments": orjson.dumps(
             {"description": f"child {i}", "prompt": f"CHILD {i}"}).decode()}}
        for i in range(10)
    ]
    return Reply.stream([openai_chunk({"tool_calls": calls}),
                         openai_chunk({}, finish="tool_calls"), OPENAI_DONE])


async def test_a_server_reusing_tool_call_ids_loses_no_call(
    server: LLMServer, tmp_path: Path
) -> None:
    server.route = _per_response_ids_route
    env = {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": server.url + "/v1", "PATH": "/usr/bin:/bin"}
    events: list[Event] = []
    with trio.fail_after(30):
        async with open_runtime("openai", model="m", env=env, workspace=tmp_path, trace=False,
                                on_event=events.append) as rt:
            outcome = await rt.run("fan out")
    check_invariants(events)
    assert (outcome.status, outcome.result) == ("completed", "all 10")
    finished = by_type(events, ToolFinished)
    assert [e.status for e in finished].count("ok") == 20  # type: ignore[attr-defined]
    ids = [e.tool_use_id for e in finished]  # type: ignore[attr-defined]
    assert len(set(ids)) == 20, "every call has its own id in the run"
    tree = TraceTree.from_events(events)
    children = [child for call in tree.roots[0].children for child in call.children]
    assert [len(c.children) for c in children] == [1] * 10, "no tool node lost in the tree"
    # The provider is sent its own ids back: each child's history says call_0.
    child_followups = [r.json for r in server.requests
                       if any(m["role"] == "tool" for m in r.json["messages"])
                       and r.json["messages"][1]["content"].startswith("CHILD")]
    assert len(child_followups) == 10
    for body in child_followups:
        assert [m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"] == ["call_0"]


async def test_open_runtime_sends_every_call_through_the_client_it_is_given(
    server: LLMServer, tmp_path: Path
) -> None:
    import httpx

    server.route = lambda request: Reply.stream(openai_text_stream(["through ", "mine"]))
    env = {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": server.url + "/v1", "PATH": "/usr/bin:/bin"}
    sent: list[str] = []

    async def note(request: httpx.Request) -> None:
        sent.append(request.url.path)

    async with httpx.AsyncClient(event_hooks={"request": [note]}) as client:
        async with open_runtime("openai", model="m", env=env, workspace=tmp_path, trace=False,
                                http_client=client) as rt:
            outcome = await rt.run("hello")
        assert not client.is_closed, "a client of the caller's own is left open"
    assert outcome.result == "through mine"
    assert sent == ["/v1/chat/completions"]
