"""MCP resources and prompts for the agents and the user (docs/mcp.md, "Resources", "Prompts").

* The tools ``list_mcp_resources`` and ``read_mcp_resource`` (read-only), offered when a
  started server has resources.
* ``@server:uri`` in a prompt: :func:`attach_mentions` reads each mentioned resource and adds
  its content to the prompt (text; a binary one as a note), cut to :data:`MAX_RESOURCE_CHARS`.
* :func:`render_contents` and :func:`render_prompt`: how a resource and a server's prompt read.
"""

from __future__ import annotations

import contextlib
import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import mcp_types
import trio

from runtime.core import ConfigError, Tool, ToolContext, ToolError, one_line

from ._tool import _b64_len, _size

if TYPE_CHECKING:
    from ._server import McpServer

__all__ = [
    "MAX_MENTIONS",
    "MAX_RESOURCE_CHARS",
    "MAX_SUBSCRIPTIONS",
    "Subscriptions",
    "attach_mentions",
    "complete_prompt_line",
    "expand_prompt_command",
    "parse_prompt_args",
    "render_contents",
    "render_prompt",
    "resource_tools",
]

MAX_RESOURCE_CHARS = 100_000
"""The most characters of one resource a prompt or a read gets; the rest is cut with a note."""
MAX_MENTIONS = 10
"""The most ``@server:uri`` mentions one prompt has read; later ones stay as text."""
MAX_COMPLETIONS = 20
"""The most values one completion of a prompt argument offers (the server may give 100)."""
MAX_SUBSCRIPTIONS = 20
"""The most resources one chat follows (``resources/subscribe``); later mentions are not."""
SUBSCRIBE_TIMEOUT_S = 3.0
"""How long a chat waits for a server to take one subscription, and at its end for all the
unsubscriptions."""
MAX_PROMPT_ARGS = 100
"""The most arguments a prompt command passes (a prompt may declare more; they stay unset)."""

# ``@server:uri``: a server name as .mcp.json allows, a colon, a URI up to whitespace. Only at the
# start of the text or after whitespace, so an email address is not a mention.
_MENTION = re.compile(r"(?<!\S)@([A-Za-z0-9_-]+):(\S+)")


def render_contents(result: mcp_types.ReadResourceResult, *, max_chars: int) -> str:
    """A resource's contents as text: text parts as they are, a binary part as a note
    (``[image/png, 1.2 kB: blob://dot]``), all of it cut to *max_chars*."""
    parts: list[str] = []
    for item in result.contents:
        if isinstance(item, mcp_types.TextResourceContents):
            parts.append(item.text)
        else:
            mime = item.mime_type or "application/octet-stream"
            parts.append(f"[{mime}, {_size(_b64_len(item.blob))}: {item.uri}]")
    text = "\n".join(parts)
    if len(text) > max_chars:
        cut = len(text) - max_chars
        text = f"{text[:max_chars]}\n[{cut} more characters of this resource not shown]"
    return text


def render_prompt(result: mcp_types.GetPromptResult) -> str:
    """A server's prompt as one user message: its messages' text, each assistant message
    marked, anything but text as a note."""
    parts: list[str] = []
    for message in result.messages:
        block = message.content
        if isinstance(block, mcp_types.TextContent):
            text = block.text
        elif isinstance(block, mcp_types.EmbeddedResource) and isinstance(
            block.resource, mcp_types.TextResourceContents
        ):
            text = block.resource.text
        else:
            text = f"[{getattr(block, 'mime_type', None) or block.type} content]"
        parts.append(text if message.role == "user" else f"(assistant) {text}")
    return "\n\n".join(parts)


def parse_prompt_args(prompt: mcp_types.Prompt, words: Sequence[str]) -> dict[str, str]:
    """The arguments of ``/mcp__server__prompt a b name=value``: by position in the order the
    prompt declares them, or by ``name=value``.

    Raises:
        ToolError: an unknown name, too many values, more than :data:`MAX_PROMPT_ARGS`, or a
            required argument missing (one line naming it).
    """
    out = _assign(prompt, words)
    missing = [a.name for a in (prompt.arguments or []) if a.required and a.name not in out]
    if missing:
        raise ToolError(f"prompt {prompt.name!r} needs {', '.join(missing)}")
    return out


def _assign(prompt: mcp_types.Prompt, words: Sequence[str]) -> dict[str, str]:
    # Each word to its argument: ``name=value`` by name, the others by position.
    declared = [a.name for a in (prompt.arguments or [])]
    if len(words) > MAX_PROMPT_ARGS:
        raise ToolError(f"at most {MAX_PROMPT_ARGS} arguments, not {len(words)}")
    out: dict[str, str] = {}
    position = 0
    for word in words:
        name, eq, value = word.partition("=")
        if eq and name in declared:
            out[name] = value
            continue
        while position < len(declared) and declared[position] in out:
            position += 1
        if position >= len(declared):
            raise ToolError(
                f"prompt {prompt.name!r} takes {len(declared)} argument(s): "
                f"{one_line(', '.join(declared), 200) or 'none'}; {word!r} is one too many"
            )
        out[declared[position]] = word
        position += 1
    return out


async def complete_prompt_line(servers: Mapping[str, McpServer], line: str) -> list[str]:
    """What the last word of ``/mcp__SERVER__PROMPT args… partial`` may become: the server's
    completions (``completion/complete``) of the argument that word is, each as the whole
    word (``name=`` kept, quoted if it has spaces), at most :data:`MAX_COMPLETIONS`.

    The words before it are the context the server gets (a later argument's values may
    depend on an earlier one's). Nothing (``[]``) when the line names no prompt of a started
    server that offers completions, the word is past the prompt's arguments, or the server
    failed (completion is a help, not a request: no error).

    Cancellation: cancels the request in flight (the connection stays up).
    """
    head, sep, rest = line.partition(" ")
    found = prompt_commands(servers.values()).get(head[1:]) if sep else None
    if found is None or not found[0].completes:
        return []
    server, prompt = found
    before, _, partial = rest.rpartition(" ")
    try:
        given = _assign(prompt, shlex.split(before))
    except (ValueError, ToolError):
        return []
    declared = [a.name for a in (prompt.arguments or [])]
    name, eq, value = partial.partition("=")
    prefix = f"{name}=" if eq and name in declared else ""
    if not prefix:
        name, value = next((n for n in declared if n not in given), ""), partial
    if not name:
        return []
    ref = mcp_types.PromptReference(type="ref/prompt", name=prompt.name)
    try:
        values = await server.complete(ref, name, value, given)
    except ToolError:
        return []
    return [prefix + shlex.quote(v) for v in values[:MAX_COMPLETIONS]]


async def attach_mentions(servers: Mapping[str, McpServer], text: str) -> str:
    """*text* with the content of each ``@server:uri`` it mentions added after it.

    A mention of a server that is not configured, or a URI the server cannot read, stays as
    it is and gets a one-line note instead of content. At most :data:`MAX_MENTIONS` are read.

    Cancellation: cancels the read in flight (the server's connection stays up).
    """
    blocks: list[str] = []
    seen: set[tuple[str, str]] = set()
    for match in _MENTION.finditer(text):
        name, uri = match.group(1), match.group(2).rstrip(".,;:!?)")
        server = servers.get(name)
        if server is None or (name, uri) in seen:
            continue
        seen.add((name, uri))
        if len(seen) > MAX_MENTIONS:
            blocks.append(f"[more than {MAX_MENTIONS} resources mentioned: the rest not read]")
            break
        try:
            result = await server.read_resource(uri)
        except ToolError as exc:
            blocks.append(f"[@{name}:{uri} could not be read: {exc}]")
            continue
        body = render_contents(result, max_chars=MAX_RESOURCE_CHARS)
        blocks.append(f'<resource server="{name}" uri="{uri}">\n{body}\n</resource>')
    if not blocks:
        return text
    return text + "\n\n" + "\n\n".join(blocks)


async def expand_prompt_command(servers: Mapping[str, McpServer], line: str) -> str:
    """The text of the server's prompt that ``/mcp__SERVER__PROMPT [args]`` names.

    Arguments are words as a shell splits them (quote a value with spaces), by position or
    ``name=value`` (:func:`parse_prompt_args`).

    Raises:
        ConfigError: no such prompt of a started server, bad arguments, or the server refused.
    """
    head, _, rest = line.partition(" ")
    found = prompt_commands(servers.values()).get(head[1:])
    if found is None:
        known = ", ".join(f"/{n}" for n in sorted(prompt_commands(servers.values()))) or "none"
        raise ConfigError(f"no MCP prompt {head} (prompts: {one_line(known, 300)})")
    server, prompt = found
    try:
        words = shlex.split(rest)
    except ValueError as exc:
        raise ConfigError(f"{head}: {exc}") from None
    try:
        result = await server.get_prompt(prompt.name, parse_prompt_args(prompt, words))
    except ToolError as exc:
        raise ConfigError(f"{head}: {exc}") from None
    text = render_prompt(result)
    if len(text) > MAX_RESOURCE_CHARS:
        cut = len(text) - MAX_RESOURCE_CHARS
        text = f"{text[:MAX_RESOURCE_CHARS]}\n[{cut} more characters of this prompt not shown]"
    return text


class _ResourceTool(Tool):
    servers: ClassVar[Mapping[str, McpServer]]
    read_only: ClassVar[bool] = True
    concurrency_safe: ClassVar[bool] = True
    needs_permission: ClassVar[bool] = False

    def _server(self, name: Any) -> McpServer:
        server = self.servers.get(name) if isinstance(name, str) else None
        if server is None or not (server.resources or server.resource_templates):
            known = ", ".join(n for n, s in self.servers.items() if s.resources) or "none"
            raise ToolError(f"no MCP server {name!r} with resources (servers with some: {known})")
        return server


class ListMcpResources(_ResourceTool):
    """Lists the resources (and resource templates) of the MCP servers."""

    name: ClassVar[str] = "list_mcp_resources"
    description: ClassVar[str] = (
        "List the resources the MCP servers offer (URI, name, MIME type, description), and "
        "their resource templates. Give `server` for one server's only. Read one with "
        "read_mcp_resource."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"server": {"type": "string", "description": "one server's name"}},
        "additionalProperties": False,
    }

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        names = [args["server"]] if "server" in args else list(self.servers)
        lines: list[str] = []
        for name in names:
            server = self._server(name) if "server" in args else self.servers[name]
            lines += describe_resources(server)
        return "\n".join(lines) or "no MCP server offers resources"


class ReadMcpResource(_ResourceTool):
    """Reads one resource of an MCP server."""

    name: ClassVar[str] = "read_mcp_resource"
    description: ClassVar[str] = (
        "Read one resource of an MCP server by its URI (see list_mcp_resources); a URI may "
        "also fill in one of a server's resource templates. Binary content is described, "
        "not shown."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "server": {"type": "string", "description": "the server's name"},
            "uri": {"type": "string", "description": "the resource's URI"},
        },
        "required": ["server", "uri"],
        "additionalProperties": False,
    }

    def summary(self, args: Mapping[str, Any]) -> str:
        return one_line(f"read_mcp_resource: @{args.get('server')}:{args.get('uri')}")

    async def call(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        server = self._server(args["server"])
        result = await server.read_resource(args["uri"])
        cap = min(MAX_RESOURCE_CHARS, ctx.limits.max_output_chars)
        return render_contents(result, max_chars=cap)


def describe_resources(server: McpServer) -> list[str]:
    """One line per resource and template of *server*
    (``@server:uri  name  mime  description``)."""
    lines = []
    for res in server.resources:
        fields = (f"@{server.name}:{res.uri}", res.name, res.mime_type, _first(res.description))
        lines.append(_fields(fields))
    for tpl in server.resource_templates:
        fields = (
            f"@{server.name}:{tpl.uri_template}",
            f"{tpl.name} (template)",
            tpl.mime_type,
            _first(tpl.description),
        )
        lines.append(_fields(fields))
    return lines


def _fields(fields: Iterable[str | None]) -> str:
    # Two spaces between fields, each on one line and bounded: the servers' words.
    return "  ".join(one_line(f, 200) for f in fields if f)


def _first(text: str | None) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def resource_tools(servers: Mapping[str, McpServer]) -> list[Tool]:
    """The two resource tools, when a started server offers resources or templates."""
    ready = [s for s in servers.values() if s.state == "ready"]
    if not any(s.resources or s.resource_templates for s in ready):
        return []
    attrs = {"servers": servers}
    return [
        type("ListMcpResources", (ListMcpResources,), attrs)(),
        type("ReadMcpResource", (ReadMcpResource,), attrs)(),
    ]


def prompt_commands(servers: Iterable[McpServer]) -> dict[str, tuple[McpServer, mcp_types.Prompt]]:
    """Each started server's prompts by chat command name (``mcp__SERVER__PROMPT``)."""
    out: dict[str, tuple[McpServer, mcp_types.Prompt]] = {}
    for server in servers:
        if server.state != "ready":
            continue
        for prompt in server.prompts:
            out[f"mcp__{server.name}__{prompt.name}"] = (server, prompt)
    return out


class Subscriptions:
    """The resources a chat attached with ``@server:uri`` and follows (docs/mcp.md,
    "Following a resource"): each subscribed, where its server takes subscriptions; a change
    the server tells of is told to the user once (:attr:`on_change`) and the next message gets
    the resource's new content (:meth:`take`); all unsubscribed at the end (:meth:`close`).

    Args:
        servers: the run's servers by name (their ``resources/updated`` come here from now on).
    """

    def __init__(self, servers: Mapping[str, McpServer]) -> None:
        self._servers = servers
        self.followed: list[tuple[str, str]] = []
        """(server, URI) of each resource subscribed to, in order; at most MAX_SUBSCRIPTIONS."""
        self.changed: dict[tuple[str, str], None] = {}
        """The followed resources that changed since the last :meth:`take`, in order."""
        self.on_change: Callable[[str], None] | None = None
        """Told one line when a followed resource changes (once until the next message)."""
        for server in servers.values():
            server.on_resource_updated = self._updated

    def _updated(self, server: McpServer, uri: str) -> None:
        key = (server.name, uri)
        if key not in self.followed or key in self.changed:
            return  # not ours, or told already: a server repeating itself costs nothing
        self.changed[key] = None
        if self.on_change is not None:
            self.on_change(
                f"@{server.name}:{one_line(uri, 200)} changed: "
                "your next message gets its new content"
            )

    async def follow(self, text: str) -> list[str]:
        """Subscribe to each resource *text* mentions that is not followed yet, on servers
        that take subscriptions; return a one-line note for each that could not be (refused,
        or no answer within :data:`SUBSCRIBE_TIMEOUT_S`).

        Cancellation: cancels the request in flight (the connection stays up).
        """
        notes: list[str] = []
        for match in _MENTION.finditer(text):
            name, uri = match.group(1), match.group(2).rstrip(".,;:!?)")
            server = self._servers.get(name)
            key = (name, uri)
            if server is None or not server.subscribes or key in self.followed:
                continue
            if len(self.followed) >= MAX_SUBSCRIPTIONS:
                notes.append(f"{MAX_SUBSCRIPTIONS} resources are followed: @{name}:{uri} is not")
                break
            try:
                with trio.fail_after(SUBSCRIBE_TIMEOUT_S):
                    await server.subscribe(uri)
            except ToolError as exc:
                notes.append(f"@{name}:{uri} is not followed: {exc}")
                continue
            except trio.TooSlowError:
                notes.append(
                    f"@{name}:{uri} is not followed: mcp server {name!r} did not answer the "
                    f"subscription within {SUBSCRIBE_TIMEOUT_S:g} s"
                )
                continue
            self.followed.append(key)
        return notes

    def take(self, text: str) -> str:
        """*text* with a note naming each followed resource that changed since the last
        message; the note mentions it, so its new content is attached (:func:`attach_mentions`).
        """
        if not self.changed:
            return text
        changed, self.changed = list(self.changed), {}
        mentions = " ".join(f"@{name}:{uri}" for name, uri in changed)
        return f"{text}\n\n(changed since they were attached: {mentions} )"

    async def close(self) -> None:
        """Unsubscribe from every followed resource, each server's refusal ignored; bounded
        by :data:`SUBSCRIBE_TIMEOUT_S` in all.

        Cancellation: stops unsubscribing (the servers forget them with the connection).
        """
        followed, self.followed = self.followed, []
        self.changed.clear()
        with trio.move_on_after(SUBSCRIBE_TIMEOUT_S):
            for name, uri in followed:
                # A server that went away, or never knew it: nothing to undo.
                with contextlib.suppress(ToolError):
                    await self._servers[name].subscribe(uri, on=False)
