"""A server built with the SDK's MCPServer (FastMCP) that asks the client things, some of them
badly, for the MCP client tests (stdio: ``python tests/mcp_bad_server.py``).

Tools:

* ``sample``: one sampling request with ``text``; returns the model's answer.
* ``flood``: ``n`` sampling requests one after another; returns how many were answered.
* ``ask``: a form elicitation (a name and an age); returns the action and the content.
* ``ask_url``: a URL-mode elicitation; returns the action.
* ``pester``: asks ``ask``'s question ``n`` times whatever the answers; returns the actions.
* ``notify``: sends a log message and ``notifications/tools/list_changed`` after adding a tool
  ``late``.
* ``outcomes_so_far``: how the ``sample`` and ``ask`` calls so far ended here, as the server saw them
  (``sample cancelled``: the client cancelled the call; ``sample refused: …``).

``python tests/mcp_bad_server.py http`` serves it over streamable HTTP on a loopback port
(printed first).

Resources: ``text://hello`` (text), ``blob://dot`` (a PNG), ``huge://{megabytes}`` (a template: a
text of that many MB). Prompts: ``greet`` (``name``, optional ``style``), ``wide`` (a thousand
arguments).
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Awaitable

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.prompts.base import Prompt, PromptArgument
from mcp.types import SamplingMessage, TextContent
from pydantic import BaseModel

app = MCPServer("bad-server")
_DOT = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


async def _sample(ctx: Context, text: str) -> str:
    result = await ctx.session.create_message(
        [SamplingMessage(role="user", content=TextContent(type="text", text=text))],
        max_tokens=50,
        system_prompt="You are a test server.",
    )
    content = result.content
    return content.text if isinstance(content, TextContent) else str(content)


outcomes: list[str] = []


async def _watched(what: str, answer: Awaitable[str]) -> str:
    try:
        result = await answer
    except anyio.get_cancelled_exc_class():
        outcomes.append(f"{what} cancelled")
        raise
    except Exception as exc:
        outcomes.append(f"{what} refused: {exc}")
        raise
    outcomes.append(f"{what}: {result}")
    return result


@app.tool()
async def sample(ctx: Context, text: str) -> str:
    """Ask the client's model."""
    return await _watched("sample", _sample(ctx, text))


@app.tool()
async def outcomes_so_far() -> str:
    """How the sample and ask calls ended, as this server saw them."""
    return json.dumps(outcomes)


@app.tool()
async def flood(ctx: Context, n: int = 100) -> str:
    """Ask the client's model n times."""
    answered = refused = 0
    for i in range(n):
        try:
            await _sample(ctx, f"question {i}")
            answered += 1
        except Exception:
            refused += 1
    return f"answered {answered}, refused {refused}"


class Person(BaseModel):
    name: str
    age: int


async def _ask(ctx: Context) -> str:
    result = await ctx.elicit("Who are you?", schema=Person)
    if result.action == "accept":
        return f"accept: {result.data.name} is {result.data.age}"
    return result.action


@app.tool()
async def ask(ctx: Context) -> str:
    """Ask the user for a name and an age."""
    return await _watched("ask", _ask(ctx))


@app.tool()
async def pester(ctx: Context, n: int = 100) -> str:
    """Ask the user n times."""
    actions = [(await ctx.elicit("Who are you?", schema=Person)).action for _ in range(n)]
    return " ".join(f"{a}:{actions.count(a)}" for a in sorted(set(actions)))


@app.tool()
async def ask_url(ctx: Context) -> str:
    """Send the user to a page."""
    result = await ctx.elicit_url("Sign in to the example", "https://example.com/login", "e-1")
    return result.action


@app.tool()
async def notify(ctx: Context) -> str:
    """A log message, then a new tool and tools/list_changed."""
    await ctx.log("warning", "the server says hello", logger_name="bad")

    @app.tool()
    async def late() -> str:
        """A tool that came later."""
        return "late"

    await ctx.session.send_tool_list_changed()
    return "notified"


@app.resource("text://hello", mime_type="text/plain")
def hello() -> str:
    """A greeting."""
    return "hello from the resource"


@app.resource("blob://dot", mime_type="image/png")
def dot() -> bytes:
    """A red dot."""
    return _DOT


@app.resource("huge://{megabytes}", mime_type="text/plain")
def huge(megabytes: str) -> str:
    """A text of that many MB."""
    return "x" * (int(megabytes) * 1_000_000)


@app.prompt()
def greet(name: str, style: str = "plain") -> str:
    """Greet someone."""
    return f"Say hello to {name}, {style}."


def _wide(**kwargs: str) -> str:
    return f"{len(kwargs)} arguments"


app.add_prompt(
    Prompt(
        name="wide",
        description="A prompt with a thousand arguments.",
        arguments=[PromptArgument(name=f"a{i}", required=False) for i in range(1000)],
        fn=_wide,
    )
)


if __name__ == "__main__":
    if sys.argv[1:] == ["http"]:
        from mcp_serve import serve_http  # beside this script

        serve_http(app)
    else:
        app.run("stdio")
