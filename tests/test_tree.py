"""TraceTree: the tree rebuilt from the flat event stream (docs/tree.md)."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trace_factory import (
    AgentSpec,
    ToolSpec,
    agent_call,
    agent_specs,
    run_events,
    small_run,
    to_events,
)

from runtime.core import _events
from runtime.core._errors import EventDecodeError, UnknownEventType
from runtime.trace._tree import (
    AGENT_STATUSES,
    BROKEN_LINKS,
    TEXT_KEEP,
    TOOL_STATUSES,
    AgentNode,
    ToolNode,
    TraceSet,
    TraceTree,
    split_runs,
)

AGENT_KEYS = [
    "kind",
    "id",
    "name",
    "status",
    "parent_tool_use_id",
    "duration_s",
    "input_tokens",
    "output_tokens",
]
TOOL_KEYS = ["kind", "id", "name", "status", "duration_s"]


def tree_of(dicts: list[dict[str, Any]], *, live: bool = False) -> TraceTree:
    return TraceTree.from_events(to_events(dicts), live=live)


def plain(tree: TraceTree, **kwargs: Any) -> dict[str, Any]:
    return tree.to_plain_json(**kwargs)


def walk(obj: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    stack = list(obj["roots"])
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(node["children"])
    return out


def by_name(tree: TraceTree, name: str) -> AgentNode:
    return next(a for a in tree.agents.values() if a.name == name)


def test_the_json_has_the_spec_keys_in_order_for_every_node() -> None:
    tree = tree_of(list(run_events(small_run())))
    data = plain(tree)
    assert list(data)[:2] == ["run_id", "status"]
    assert list(data)[-1] == "roots"
    assert data["run_id"] == "run_0001"
    assert data["status"] == "completed"
    for node in walk(data):
        keys = AGENT_KEYS if node["kind"] == "agent" else TOOL_KEYS
        assert list(node)[: len(keys)] == keys
        assert list(node)[-1] == "children"


def test_agents_hold_their_tool_calls_and_agent_calls_hold_their_sub_agent() -> None:
    tree = tree_of(list(run_events(small_run())))
    (main,) = tree.roots
    assert main.name == "main"
    assert main.parent_tool_use_id is None
    assert [t.name for t in main.children] == ["agent", "agent", "agent", "write", "read"]
    worker_call = main.children[0]
    (worker,) = worker_call.children
    assert worker.name == "worker"
    assert worker.parent_tool_use_id == worker_call.id
    assert worker.parent is worker_call
    assert worker.parent_agent_id == main.id
    assert worker.depth == 1
    assert [t.name for t in worker.children] == ["bash"]


def test_statuses_cancels_permissions_and_errors_are_kept() -> None:
    tree = tree_of(list(run_events(small_run())))
    main = tree.roots[0]
    sleeper_call = main.children[1]
    assert sleeper_call.status == "cancelled"
    assert sleeper_call.cancel is not None
    assert (sleeper_call.cancel.by, sleeper_call.cancel.reason) == ("user", "taking too long")
    assert by_name(tree, "sleeper").status == "cancelled"
    flaky = by_name(tree, "flaky")
    assert flaky.status == "failed"
    assert flaky.error == "flaky ended failed"
    write = main.children[3]
    assert write.status == "denied"
    assert write.permission_granted is False
    assert write.permission_wait_s == pytest.approx(0.5)
    assert write.permission_intervals
    assert write.permission_intervals[0][1] > write.permission_intervals[0][0]


def test_own_tokens_follow_turns_then_the_agents_totals_and_roll_up() -> None:
    spec = AgentSpec(
        turns=[[agent_call(AgentSpec(name="w", input_tokens=7, output_tokens=3))]],
        input_tokens=10,
        output_tokens=1,
    )
    dicts = list(run_events(spec, run_events=False))
    main_finish = next(
        i
        for i, d in enumerate(dicts)
        if d["type"] == "agent_finished" and d["parent_tool_use_id"] is None
    )
    live = tree_of(dicts[:main_finish], live=True)
    main = live.roots[0]
    assert (main.input_tokens, main.output_tokens) == (20, 2)  # two turns so far
    live.rollup()
    assert (main.total_input_tokens, main.total_output_tokens) == (20 + 7, 2 + 3)  # w: one turn
    # agent_finished carries the agent's own totals: they replace what the turns added up to.
    dicts[main_finish]["input_tokens"] = 500
    done = tree_of(dicts)
    assert done.roots[0].input_tokens == 500
    assert done.total_input_tokens == 500 + 7


def test_text_is_bounded_and_its_length_counted() -> None:
    tree = TraceTree()
    base = {"seq": 1, "ts": 1.0, "run_id": "r", "agent_id": "a", "parent_tool_use_id": None}
    tree.apply_dict(
        {
            "type": "agent_started",
            **base,
            "name": "main",
            "parent_agent_id": None,
            "depth": 0,
            "prompt": "p",
        }
    )
    for i in range(5000):
        tree.apply_dict({"type": "text_delta", **base, "text": f"{i % 10}"})
    agent = tree.agents["a"]
    assert agent.text_len == 5000
    assert len(agent.text) == TEXT_KEEP
    assert agent.text == "".join(str(i % 10) for i in range(5000))[-TEXT_KEEP:]


def test_unfinished_nodes_run_while_live_and_are_interrupted_when_the_trace_ends() -> None:
    dicts = list(run_events(small_run()))
    cut = dicts[: len(dicts) // 2]
    live = tree_of(cut, live=True)
    statuses = {n.status for n in live.iter_nodes()}
    assert "running" in statuses
    assert "interrupted" not in statuses
    assert live.status == "running"
    live.end()
    assert live.status == "interrupted"
    assert {n.status for n in live.iter_nodes()} >= {"interrupted"}
    assert "running" not in {n.status for n in live.iter_nodes()}
    assert all(n.duration_s is not None for n in live.iter_nodes() if n.started_ts is not None)


def test_a_sub_agent_seen_before_its_call_is_attached_when_the_call_arrives() -> None:
    dicts = list(
        run_events(AgentSpec(turns=[[agent_call(AgentSpec(name="w", turns=[[ToolSpec()]]))]]))
    )
    call = next(
        i for i, d in enumerate(dicts) if d["type"] == "tool_started" and d["name"] == "agent"
    )
    moved = dicts[call]
    child_end = next(
        i
        for i, d in enumerate(dicts)
        if d["type"] == "agent_finished" and d["parent_tool_use_id"] == moved["tool_use_id"]
    )
    reordered = dicts[:call] + dicts[call + 1 : child_end + 1] + [moved] + dicts[child_end + 1 :]
    assert plain(tree_of(reordered)) == plain(tree_of(dicts))
    # Before the call arrives, the sub-agent is not lost: it is listed as a root.
    early = tree_of(dicts[:call] + dicts[call + 1 : child_end], live=True)
    assert [a.name for a in early.roots] == ["main", "w"]


def test_an_agent_whose_call_never_appears_is_shown_as_a_root() -> None:
    dicts = [
        d
        for d in run_events(small_run())
        if not (d["type"] == "tool_started" and d["name"] == "agent")
    ]
    tree = tree_of(dicts)
    assert [a.name for a in tree.roots] == ["main", "worker", "sleeper", "flaky"]
    assert tree.roots[1].parent_tool_use_id is not None


def test_apply_and_apply_dict_build_the_same_tree() -> None:
    dicts = list(run_events(small_run(), order="time"))
    from_dicts = TraceTree()
    for d in dicts:
        from_dicts.apply_dict(d)
    from_dicts.end()
    assert plain(from_dicts) == plain(tree_of(dicts))


def test_apply_dict_rejects_a_bad_field_and_leaves_the_tree_unchanged() -> None:
    dicts = list(run_events(small_run()))
    tree = tree_of(dicts[:10], live=True)
    before = plain(tree)
    bad = dict(
        dicts[10],
        type="tool_started",
        tool_use_id="toolu_x",
        name="bash",
        input="not an object",
        summary="s",
    )
    with pytest.raises(EventDecodeError, match="'input'"):
        tree.apply_dict(bad)
    with pytest.raises(EventDecodeError, match="'status'"):
        tree.apply_dict(
            dict(
                dicts[10],
                type="tool_finished",
                tool_use_id="toolu_x",
                name="bash",
                status="exploded",
                output="",
                duration_s=1.0,
            )
        )
    with pytest.raises(UnknownEventType):
        tree.apply_dict(dict(dicts[10], type="from_the_future"))
    assert "toolu_x" not in tree.tools
    assert plain(tree) == before


def test_a_duplicated_line_changes_nothing() -> None:
    dicts = list(run_events(small_run()))
    doubled = [d for d in dicts for _ in range(2)]
    assert plain(tree_of(doubled)) == plain(tree_of(dicts))


def test_events_of_other_runs_are_ignored_by_a_tree_and_split_by_a_set() -> None:
    first = list(run_events(small_run(), run_id="run_a"))
    second = list(run_events(AgentSpec(name="solo"), run_id="run_b", t0=1_800_000_000.0))
    mixed = first[:5] + second + first[5:]
    tree = tree_of(mixed)
    assert tree.run_id == "run_a"
    assert tree.other_run_events == len(second)
    assert plain(tree) == plain(tree_of(first))
    trees = split_runs(to_events(mixed))
    assert [t.run_id for t in trees] == ["run_a", "run_b"]
    assert [a.name for a in trees[1].roots] == ["solo"]
    traces = TraceSet()
    for d in mixed:
        traces.apply_dict(d)
    traces.end()
    assert [plain(t) for t in traces.trees] == [plain(t) for t in trees]


def test_a_chat_session_has_several_roots_in_start_order() -> None:
    tree = tree_of(
        list(run_events([AgentSpec(name="main"), AgentSpec(name="main", status="failed")]))
    )
    assert [a.status for a in tree.roots] == ["completed", "failed"]
    assert tree.status == "failed"  # run_finished carries the last root's status


def test_subtree_max_depth_and_status_filters() -> None:
    tree = tree_of(list(run_events(small_run())))
    main = tree.roots[0]
    sleeper_call = main.children[1]
    sub = plain(tree, subtree=sleeper_call.id)
    assert [r["id"] for r in sub["roots"]] == [sleeper_call.id]
    assert sub["roots"][0]["children"][0]["name"] == "sleeper"
    shallow = plain(tree, max_depth=0)
    assert all(call["children"] == [] for call in shallow["roots"][0]["children"])
    assert len(shallow["roots"][0]["children"]) == 5
    failed = plain(tree, status="failed")
    names = [n["name"] for n in walk(failed)]
    assert sorted(names) == ["agent", "flaky", "main"]  # the failed agent and the path to it
    assert plain(tree, status="running")["roots"] == []
    with pytest.raises(KeyError):
        tree.to_json(subtree="nope")


def test_running_subtrees_lists_running_agent_calls_in_start_order() -> None:
    spec = AgentSpec(
        turns=[
            [
                agent_call(AgentSpec(name="a1", turns=[[agent_call(AgentSpec(name="deep"))]])),
                agent_call(AgentSpec(name="a2")),
                ToolSpec(),
            ]
        ]
    )
    dicts = list(run_events(spec, run_events=False))
    deep_start = next(
        i for i, d in enumerate(dicts) if d["type"] == "agent_started" and d["name"] == "deep"
    )
    tree = tree_of(dicts[: deep_start + 1], live=True)
    running = tree.running_subtrees()
    assert [(r.agent_name, r.description) for r in running] == [
        ("a1", "a1 part"),
        ("a2", "a2 part"),
        ("deep", "deep part"),
    ]
    assert running[1].agent_id is None  # a2's call is out, a2 itself not started yet
    assert running[2].depth == 2
    assert all(tree.tools[r.tool_use_id].name == "agent" for r in running)
    tree.end()
    assert tree.running_subtrees() == []


def test_status_lists_match_the_event_module() -> None:
    assert AGENT_STATUSES == _events.AGENT_STATUSES
    assert TOOL_STATUSES == _events.TOOL_STATUSES


def test_nodes_serialise_natively_without_internal_attributes() -> None:
    tree = tree_of(list(run_events(small_run())))
    data = orjson.loads(orjson.dumps(tree.to_json()))
    for node in walk(data):
        assert not any(key.startswith("_") for key in node)
        assert "parent" not in node
    assert isinstance(tree.roots[0], AgentNode)
    assert isinstance(tree.roots[0].children[0], ToolNode)


# ---------------------------------------------------------------------------- properties


def _unfinished_is_consistent(tree: TraceTree) -> None:
    for node in tree.iter_nodes():
        if node.finished:
            assert node.status not in ("running", "interrupted")
        else:
            assert node.status == ("interrupted" if tree.ended else "running")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=agent_specs(), seed=st.integers(0, 2**32 - 1))
def test_any_valid_interleaving_builds_the_canonical_tree(spec: AgentSpec, seed: int) -> None:
    canonical = list(run_events(spec))
    shuffled = list(run_events(spec, order="random", rng=random.Random(seed)))
    assert sorted(d["type"] for d in shuffled) == sorted(d["type"] for d in canonical)
    expected = plain(tree_of(canonical))
    assert plain(tree_of(shuffled)) == expected
    # The event invariants (docs/events.md#invariants) of the generated stream, as the tree sees
    # them: one node per start event, every node finished, every sub-agent under its call.
    tree = tree_of(shuffled)
    assert len(tree.agents) == sum(d["type"] == "agent_started" for d in canonical)
    assert len(tree.tools) == sum(d["type"] == "tool_started" for d in canonical)
    assert all(n.finished for n in tree.iter_nodes())
    for agent in tree.agents.values():
        assert (agent.parent is None) == (agent.parent_tool_use_id is None)
        if agent.parent is not None:
            assert agent.parent.name == "agent"
            assert agent.parent.finished_ts is not None
            assert agent.finished_ts is not None
            assert agent.finished_ts <= agent.parent.finished_ts


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=agent_specs(), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_a_truncated_stream_leaves_every_unfinished_node_interrupted(
    spec: AgentSpec, seed: int, data: st.DataObject
) -> None:
    dicts = list(run_events(spec, order="random", rng=random.Random(seed)))
    cut = data.draw(st.integers(0, len(dicts)), label="cut")
    prefix = dicts[:cut]
    finished = {d.get("agent_id") for d in prefix if d["type"] == "agent_finished"}
    finished |= {d["tool_use_id"] for d in prefix if d["type"] == "tool_finished"}
    live = tree_of(prefix, live=True)
    _unfinished_is_consistent(live)
    dead = tree_of(prefix)
    _unfinished_is_consistent(dead)
    for node in dead.iter_nodes():
        assert (node.status != "interrupted") == (node.id in finished or (cut == len(dicts)))
    if any(n.status == "interrupted" for n in dead.iter_nodes()):
        assert dead.status == "interrupted"
    # Feeding the rest to the live tree gives the whole tree: nothing was lost or doubled.
    for d in dicts[cut:]:
        live.apply_dict(d)
    live.end()
    assert plain(live) == plain(tree_of(dicts))


def test_a_rejected_event_creates_no_placeholder() -> None:
    tree = TraceTree()
    base = {"seq": 1, "ts": 1.0, "run_id": "r", "agent_id": "ghost", "parent_tool_use_id": None}
    for kind in ("text_delta", "thinking_delta", "user_message"):
        with pytest.raises(EventDecodeError, match="'text'"):
            tree.apply_dict({"type": kind, **base, "text": 42})
    with pytest.raises(EventDecodeError, match="'input_tokens'"):
        tree.apply_dict(
            {
                "type": "turn_finished",
                **base,
                "turn": 1,
                "stop_reason": "end_turn",
                "input_tokens": "many",
                "output_tokens": 1,
            }
        )
    assert tree.agents == {}
    assert tree.roots == []


@pytest.mark.parametrize("keep_details", [True, False])
def test_a_node_never_gains_an_attribute_after_it_is_made(keep_details: bool) -> None:
    # CPython stores the attributes of a class's instances compactly only while they are the
    # ones set when the instance was made; one set later can turn the instance into a full
    # dict, which made updating nodes many times slower on big traces. Every start event comes
    # first here (a wide fan-out): the order in which that hurt most.
    dicts = list(run_events(small_run(), order="random", rng=random.Random(3)))
    starts = [d for d in dicts if d["type"].endswith("_started")]
    rest = [d for d in dicts if not d["type"].endswith("_started")]
    tree = TraceTree(keep_details=keep_details)
    for d in [*starts, *rest]:
        tree.apply_dict(d)
    tree.end()
    tree.rollup()
    assert any(t.permission_intervals for t in tree.tools.values())
    assert any(a.cancel is not None for a in tree.agents.values()) or any(
        t.cancel is not None for t in tree.tools.values()
    )
    agent_keys = list(vars(AgentNode("a", None)))
    tool_keys = list(vars(ToolNode("t")))
    assert all(list(vars(agent)) == agent_keys for agent in tree.agents.values())
    assert all(list(vars(tool)) == tool_keys for tool in tree.tools.values())


# ---------------------------------------------------------------------------- corrupt links


def _corrupt_events(data: st.DataObject) -> list[dict[str, Any]]:
    """Agents whose parent calls, and calls whose callers, are picked at random: cycles too."""
    agents = data.draw(st.integers(1, 8))
    tools = data.draw(st.integers(0, 8))
    base = {"run_id": "r", "ts": 1.0}
    events: list[dict[str, Any]] = []
    for i in range(agents):
        parent = data.draw(st.sampled_from([None, *(f"t{j}" for j in range(tools + 2))]))
        events.append({**base, "type": "agent_started", "agent_id": f"a{i}",
                       "parent_tool_use_id": parent, "name": "w", "parent_agent_id": None,
                       "depth": 0, "prompt": ""})
    for j in range(tools):
        owner = data.draw(st.integers(0, agents - 1))
        events.append({**base, "type": "tool_started", "agent_id": f"a{owner}",
                       "parent_tool_use_id": None, "tool_use_id": f"t{j}", "name": "agent",
                       "input": {}, "summary": ""})
    order = data.draw(st.permutations(events))
    return [{**event, "seq": n} for n, event in enumerate(order, 1)]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_parent_links_show_every_agent_exactly_once(data: st.DataObject) -> None:
    tree = TraceTree()
    for event in _corrupt_events(data):
        tree.apply_dict(event)
    tree.end()
    shown = [node.id for node in tree.iter_nodes() if node.kind == "agent"]
    assert sorted(n for n in shown if n != BROKEN_LINKS) == sorted(tree.agents)
    plain = tree.to_plain_json()
    assert len(plain["roots"]) == len(tree.roots)
    cycles = [m for m in tree.anomalies() if "cycle" in m]
    assert bool(cycles) == (BROKEN_LINKS in shown)
    for node in tree.iter_nodes():
        assert sum(1 for _ in tree.ancestors(node)) <= len(tree.agents) + len(tree.tools)


def test_nodes_stay_small_enough_for_compact_attribute_storage() -> None:
    # CPython keeps up to 29 instance attributes of a class in a compact array; from 30 on, every
    # instance gets a full dict (about five times the memory, and a million-event `trace show`
    # 30 % slower). Rare agent figures live in one `_rare` object for that reason.
    tree = tree_of(run_events(small_run()))
    agents, tools = list(tree.agents.values()), list(tree.tools.values())
    assert agents
    assert tools
    for node in [*agents, *tools, AgentNode("a", None), ToolNode("t")]:
        assert len(vars(node)) < 30, type(node).__name__


def test_the_trees_own_field_checks_name_fields_the_event_classes_have() -> None:
    """The tree checks the fields it reads by hand, for speed (reading a trace imports neither
    attrs nor the event classes: bench/README.md, "One Secrets object, typed events, one
    stamping path"); this holds every check to the event classes, so a renamed or removed field
    cannot leave a check of a field no event has."""
    import ast
    from pathlib import Path

    import attrs

    from runtime.core._events import EVENT_TYPES

    source = Path(__file__).resolve().parent.parent / "runtime" / "trace" / "_tree.py"
    checked: list[tuple[str, str]] = [
        (node.args[0].value, node.args[1].value)  # type: ignore[attr-defined]
        for node in ast.walk(ast.parse(source.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        and node.func.id == "_invalid" and len(node.args) == 2
        and all(isinstance(a, ast.Constant) for a in node.args)
    ]
    assert len(checked) > 20
    wrong = [(kind, field) for kind, field in checked
             if kind not in EVENT_TYPES
             or field not in {f.name for f in attrs.fields(EVENT_TYPES[kind])}]
    assert wrong == []
