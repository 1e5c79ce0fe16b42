"""MCP resources and prompts (docs/mcp.md): listed by the command line, read by the agents'
tools, attached by ``@server:uri`` in a prompt, bounded; a server's prompt sent by
``/mcp__server__prompt``. Against server-everything (npm) and tests/mcp_bad_server.py."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from runtime import AgentStarted, ConfigError, Event, open_runtime
from runtime.core import ToolFinished
from runtime.mcp._resources import MAX_RESOURCE_CHARS
from tests.harness import run_scenario
from tests.mcp_fixtures import GIGABYTE_SERVER, bad_http, everything_server, gigabyte_http
from tests.test_cli_run import cli, run_cli
from tests.test_mcp_client import bad_server, calls, of, script

__all__ = ["bad_http", "gigabyte_http"]  # fixtures


async def test_mcp_resources_and_mcp_list_show_resources_templates_and_prompts(
    tmp_path: Path,
) -> None:
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {"e": everything_server(), "b": bad_server()}}))
    proc = await run_cli(cli("mcp", "resources", "--mcp-config", str(config)), tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.decode().splitlines()
    assert "@e:demo://resource/static/document/features.md  features.md  text/markdown" in lines
    assert "@e:demo://resource/dynamic/text/{resourceId}  Dynamic Text Resource (template)" in lines
    assert "@b:blob://dot  dot  image/png" in lines
    proc = await run_cli(cli("mcp", "list", "--json", "--mcp-config", str(config)), tmp_path)
    rows = {r["name"]: r for r in json.loads(proc.stdout)["servers"]}
    args_prompt = next(p for p in rows["e"]["prompts"] if p["name"] == "args-prompt")
    assert args_prompt["command"] == "/mcp__e__args-prompt"
    assert args_prompt["arguments"] == [
        {"name": "city", "required": True},
        {"name": "state", "required": False},
    ]
    assert rows["b"]["resource_templates"] == [
        {"uri_template": "huge://{megabytes}", "name": "huge", "mime_type": "text/plain"}
    ]
    proc = await run_cli(cli("mcp", "list", "--mcp-config", str(config)), tmp_path)
    text = proc.stdout.decode().splitlines()
    assert "b  ok  stdio  7 tools, 2 resources, 1 resource templates, 2 prompts" in text
    assert "  /mcp__e__args-prompt city [state]" in text
    wide = next(line for line in text if line.startswith("  /mcp__b__wide"))
    assert wide.endswith("[a19] … (1000 arguments)")  # a thousand arguments, one bounded line


async def test_the_agents_list_and_read_resources_text_binary_and_templates(
    workspace: Path,
) -> None:
    scenario = script(
        calls(
            ("list_mcp_resources", {}),
            ("read_mcp_resource", {"server": "b", "uri": "text://hello"}),
            ("read_mcp_resource", {"server": "b", "uri": "blob://dot"}),
            ("read_mcp_resource", {"server": "b", "uri": "huge://2"}),
            ("read_mcp_resource", {"server": "b", "uri": "nope://x"}),
            ("read_mcp_resource", {"server": "x", "uri": "text://hello"}),
        )
    )
    _, events = await run_scenario(
        scenario, workspace, mcp_servers={"b": bad_server()}, permission_mode="deny"
    )
    ends = sorted(of(ToolFinished, events), key=lambda e: int(e.tool_use_id.split(".")[1]))
    listed, text, blob, huge, missing, unknown = ends  # they ran at once: in call order
    assert listed.status == "ok"  # read-only: no permission needed, even in mode deny
    assert listed.output.splitlines()[:2] == [
        "@b:text://hello  hello  text/plain  A greeting.",
        "@b:blob://dot  dot  image/png  A red dot.",
    ]
    assert "@b:huge://{megabytes}  huge (template)  text/plain  A text of that many MB." in (
        listed.output
    )
    assert text.output == "hello from the resource"
    assert blob.output == "[image/png, 70 B: blob://dot]"
    assert huge.status == "ok"
    assert len(huge.output) < 31_000  # the tool output cap (30,000) with its note
    assert missing.status == "error"
    assert "mcp server 'b' refused the read" in missing.output
    assert unknown.status == "error"
    assert unknown.output == "no MCP server 'x' with resources (servers with some: b)"


async def run_prompt(workspace: Path, prompt: str, **servers: Any) -> list[Event]:
    events: list[Event] = []
    async with open_runtime(
        scenario=script(),
        workspace=workspace,
        trace=False,
        on_event=events.append,
        mcp_servers=servers,
    ) as rt:
        await rt.run(prompt)
    return events


async def test_a_mention_attaches_the_resource_to_the_prompt(workspace: Path) -> None:
    prompt = (
        "Compare @e:demo://resource/static/document/features.md with @b:text://hello, "
        "look at @b:blob://dot and @b:nope://x; mail me@example.com, ignore @other:thing"
    )
    events = await run_prompt(workspace, prompt, e=everything_server(), b=bad_server())
    (started,) = of(AgentStarted, events)
    text = started.prompt
    assert text.startswith(prompt + "\n\n")
    assert '<resource server="e" uri="demo://resource/static/document/features.md">\n' in text
    assert "# Everything Server" in text or "Features" in text
    assert (
        '<resource server="b" uri="text://hello">\nhello from the resource\n</resource>' in text
    )
    assert '<resource server="b" uri="blob://dot">\n[image/png, 70 B: blob://dot]\n' in text
    assert "[@b:nope://x could not be read: mcp server 'b' refused the read:" in text
    assert "example.com" not in text[len(prompt) :]  # an address is not a mention
    assert "other" not in text[len(prompt) :]  # nor is a server nobody configured


async def test_a_huge_resource_is_cut_when_attached(workspace: Path) -> None:
    events = await run_prompt(workspace, "read @b:huge://5", b=bad_server())
    (started,) = of(AgentStarted, events)
    assert len(started.prompt) < MAX_RESOURCE_CHARS + 200
    assert f"[{5_000_000 - MAX_RESOURCE_CHARS} more characters of this resource not shown]" in (
        started.prompt
    )


@pytest.mark.slow
async def test_a_resource_over_the_message_cap_is_refused_and_the_server_comes_back(
    workspace: Path,
) -> None:
    # 150 MB: over the 128 MB a message may have (docs/mcp.md), from an SDK server that holds
    # it; the gigabyte tests below stream theirs, over stdio and HTTP.
    events = await run_prompt(
        workspace, "read @b:huge://150 then @b:text://hello", b=bad_server()
    )
    (started,) = of(AgentStarted, events)
    assert "[@b:huge://150 could not be read: mcp server 'b' went away during the read" in (
        started.prompt
    )
    assert "message over 128 MB" in started.prompt
    assert "hello from the resource" in started.prompt  # started again for the next read


async def test_a_prompt_command_sends_the_servers_prompt(workspace: Path) -> None:
    events = await run_prompt(
        workspace, "/mcp__e__args-prompt Paris state=Texas", e=everything_server()
    )
    (started,) = of(AgentStarted, events)
    assert started.prompt == "What's weather in Paris, Texas?"
    events = await run_prompt(workspace, "/mcp__b__greet 'Ann Lee' style=warmly", b=bad_server())
    (started,) = of(AgentStarted, events)
    assert started.prompt == "Say hello to Ann Lee, warmly."


@pytest.mark.parametrize(
    ("prompt", "error"),
    [
        ("/mcp__b__greet", "/mcp__b__greet: prompt 'greet' needs name"),
        ("/mcp__b__greet a b c", "prompt 'greet' takes 2 argument(s): name, style; 'c' is one"),
        ("/mcp__b__nope", "no MCP prompt /mcp__b__nope (prompts: /mcp__b__greet, /mcp__b__wide)"),
        ("/mcp__b__greet 'open", "/mcp__b__greet: No closing quotation"),
        ("/mcp__b__wide " + " ".join(f"a{i}=v" for i in range(1000)), "at most 100 arguments"),
    ],
)
async def test_a_bad_prompt_command_is_one_line(workspace: Path, prompt: str, error: str) -> None:
    one_line = pytest.RaisesExc(ConfigError, match=re.escape(error))
    with pytest.RaisesGroup(one_line, flatten_subgroups=True):
        await run_prompt(workspace, prompt, b=bad_server())


async def test_a_prompt_with_a_thousand_arguments_takes_them_by_name(workspace: Path) -> None:
    events = await run_prompt(workspace, "/mcp__b__wide a0=x a999=y", b=bad_server())
    (started,) = of(AgentStarted, events)
    assert started.prompt == "2 arguments"


async def test_tab_completes_a_prompts_arguments_through_the_server(workspace: Path) -> None:
    from runtime.mcp import McpConfig, open_mcp_servers

    config = McpConfig.from_mapping({"e": everything_server(), "b": bad_server()})
    async with open_mcp_servers(config, env={}, workspace=workspace) as servers:
        assert "/mcp__e__completable-prompt" in servers.prompt_command_names()
        line = "/mcp__e__completable-prompt "
        assert await servers.complete_line(line) == ["Engineering", "Sales", "Marketing", "Support"]
        assert await servers.complete_line(line + "S") == ["Sales", "Support"]
        # The next argument's values depend on the first (the context the server gets).
        assert await servers.complete_line(line + "Sales ") == ["David", "Eve", "Frank"]
        assert await servers.complete_line(line + "Engineering name=B") == ["name=Bob"]
        assert await servers.complete_line(line + "department=Support ") == ["John", "Kim", "Lee"]
        # Past the prompt's arguments, an unknown prompt, no command, a server without
        # completions: nothing, and no error.
        assert await servers.complete_line(line + "Sales Eve ") == []
        assert await servers.complete_line("/mcp__e__nope x") == []
        assert await servers.complete_line("/mcp__e__completable-prompt") == []
        assert not servers.servers["b"].completes
        assert await servers.complete_line("/mcp__b__greet A") == []


async def test_a_followed_resource_that_changes_is_told_once_and_read_again(
    workspace: Path,
) -> None:
    from runtime.mcp import McpConfig, open_mcp_servers
    from runtime.mcp._resources import MAX_SUBSCRIPTIONS, attach_mentions

    config = McpConfig.from_mapping({"e": everything_server(), "b": bad_server()})
    uri = "demo://resource/static/document/features.md"
    async with open_mcp_servers(config, env={}, workspace=workspace) as servers:
        subs = servers.subscriptions
        told: list[str] = []
        changed = trio.Event()

        def on_change(line: str) -> None:
            told.append(line)
            changed.set()

        subs.on_change = on_change
        e = servers.servers["e"]
        assert e.subscribes
        assert not servers.servers["b"].subscribes
        # b takes no subscriptions: its mention is attached but not followed.
        assert await subs.follow(f"see @e:{uri}, and @b:text://hello") == []
        assert subs.followed == [("e", uri)]
        assert subs.take("next") == "next"  # nothing changed yet
        # server-everything tells its subscribers of a change (then every 5 s) once asked to.
        await e.call_tool("toggle-subscriber-updates", {})
        with trio.fail_after(10):
            await changed.wait()
        e.on_resource_updated(e, uri)  # told again before the next message: not repeated
        e.on_resource_updated(e, "demo://not/followed")
        assert told == [f"@e:{uri} changed: your next message gets its new content"]
        text = subs.take("what now?")
        assert text == f"what now?\n\n(changed since they were attached: @e:{uri} )"
        attached = await attach_mentions(servers.servers, text)
        assert f'<resource server="e" uri="{uri}">' in attached
        assert subs.take("and now?") == "and now?"  # taken: the next message only
        # Bounded: past MAX_SUBSCRIPTIONS mentions, one note and no more subscriptions.
        many = " ".join(f"@e:demo://resource/dynamic/text/{i}" for i in range(MAX_SUBSCRIPTIONS))
        notes = await subs.follow(many)
        assert len(subs.followed) == MAX_SUBSCRIPTIONS
        assert notes == [
            f"{MAX_SUBSCRIPTIONS} resources are followed: "
            f"@e:demo://resource/dynamic/text/{MAX_SUBSCRIPTIONS - 1} is not"
        ]
        await e.call_tool("toggle-subscriber-updates", {})  # its updates off again
        await subs.close()
        assert subs.followed == []
        e.on_resource_updated(e, uri)
        assert len(told) == 1  # no longer followed: not told


async def test_in_chat_a_changed_resource_is_told_and_the_next_message_gets_it(
    tmp_path: Path,
) -> None:
    from tests.test_chat import chat, read_trace

    uri = "demo://resource/static/document/features.md"
    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {"e": everything_server()}}))
    scenario = tmp_path / "s.json"
    toggle = calls(("mcp__e__toggle-subscriber-updates", {}))
    scenario.write_text(
        json.dumps({"agents": {"main": {"turns": [toggle, {"text": "on"}, {"text": "seen"}]}}})
    )
    trace = tmp_path / "t.jsonl"
    proc = await chat(
        tmp_path,
        *("--scenario", str(scenario), "--mcp-config", str(servers), "--trace", str(trace)),
        *("--permission-mode", "allow-all"),
        stdin=f"watch @e:{uri}\nwhat changed?\n".encode(),
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode()
    assert out.count(f"@e:{uri} changed: your next message gets its new content") == 1
    first, second = (e.prompt for e in of(AgentStarted, read_trace(trace)))
    assert first.startswith(f"watch @e:{uri}\n\n<resource ")
    assert second.startswith(f"what changed?\n\n(changed since they were attached: @e:{uri} )")
    assert f'<resource server="e" uri="{uri}">' in second


class _SilentServer:
    """A server that takes subscriptions and never answers one (the timeout's only subject)."""

    name = "s"
    subscribes = True
    on_resource_updated: Any = None

    async def subscribe(self, uri: str, *, on: bool = True) -> None:
        await trio.sleep_forever()


async def test_a_subscription_never_answered_costs_a_note_not_the_chat(
    autojump_clock: Any,
) -> None:
    from runtime.mcp._resources import SUBSCRIBE_TIMEOUT_S, Subscriptions

    subs = Subscriptions({"s": _SilentServer()})  # type: ignore[dict-item]
    assert await subs.follow("@s:a://1") == [
        f"@s:a://1 is not followed: mcp server 's' did not answer the subscription within "
        f"{SUBSCRIBE_TIMEOUT_S:g} s"
    ]
    assert subs.followed == []


async def _read_watching_memory(workspace: Path, server: dict[str, Any]) -> tuple[Any, int]:
    """``read_mcp_resource`` of the gigabyte, then of nothing huge; the two calls' ends and the
    most this process's resident memory grew meanwhile (sampled every 20 ms)."""
    import psutil

    me = psutil.Process()
    base = peak = me.memory_info().rss
    scenario = script(
        calls(("read_mcp_resource", {"server": "g", "uri": "huge://gigabyte"})),
        calls(("list_mcp_resources", {})),
    )
    async with trio.open_nursery() as nursery:

        async def watch() -> None:
            nonlocal peak
            while True:
                peak = max(peak, me.memory_info().rss)
                await trio.sleep(0.02)

        nursery.start_soon(watch)
        with trio.fail_after(60):
            _, events = await run_scenario(scenario, workspace, mcp_servers={"g": server})
        nursery.cancel_scope.cancel()
    return of(ToolFinished, events), peak - base


async def test_a_gigabyte_resource_over_stdio_is_refused_at_the_message_cap_not_held(
    workspace: Path,
) -> None:
    server = {"command": sys.executable, "args": [str(GIGABYTE_SERVER), "stdio"]}
    (read, listed), grew = await _read_watching_memory(workspace, server)
    assert read.status == "error"
    assert "went away during the read (it sent a message over 128 MB)" in read.output
    assert listed.status == "ok"  # started again for the next call
    assert "huge://gigabyte" in listed.output
    assert grew < 700 * 2**20, f"grew {grew // 2**20} MB"  # the cap and a copy, not 1 GB


async def test_a_gigabyte_resource_over_http_is_refused_at_the_message_cap_not_held(
    workspace: Path, gigabyte_http: dict[str, Any], request: pytest.FixtureRequest
) -> None:
    (read, listed), grew = await _read_watching_memory(workspace, gigabyte_http)
    assert read.status == "error"
    if request.node.callspec.params["gigabyte_http"] == "json":  # one JSON body
        assert read.output == (
            "mcp server 'g' refused the read: Failed to parse JSON response: it sent a message "
            "over 128 MB"
        )
    else:  # one server-sent event
        assert read.output == (
            "mcp server 'g' went away during the read (SSE stream failed: Server-sent event "
            "exceeded the 134217728 byte limit.)"
        )
    assert listed.status == "ok"
    assert "huge://gigabyte" in listed.output
    assert grew < 700 * 2**20, f"grew {grew // 2**20} MB"


async def test_over_http_a_resource_of_megabytes_is_read_as_over_stdio(
    workspace: Path, bad_http: dict[str, Any]
) -> None:
    # The SDK server answers in one server-sent event, which the SDK's client caps at 1 MB
    # unless told otherwise: the cap is the stdio one (docs/mcp.md, "Limits").
    scenario = script(calls(("read_mcp_resource", {"server": "b", "uri": "huge://3"})))
    _, events = await run_scenario(scenario, workspace, mcp_servers={"b": bad_http})
    (read,) = of(ToolFinished, events)
    assert read.status == "ok", read.output
    assert read.output.startswith("x" * 1000)
