"""How big an agent's context may be (its model's window) and how big it is now.

:func:`context_window_for` knows the windows of the common model families, with
:data:`DEFAULT_CONTEXT_WINDOW` for the rest; an agent type's ``context_window``, then the run's
(``--context-window``, ``Limits.context_window``), come before it.

:class:`ContextMeter` keeps one agent's current size without re-counting the history each turn:
the size is the input tokens the provider reported for the last request, plus an estimate of what
was appended since, in characters divided by a characters-per-token ratio calibrated from the
reports (the whole request's characters over its reported tokens). The character total is kept
up to date incrementally: each turn counts only the messages added since the last one (O(new
messages), whatever the length of the history); a compaction, which rewrites the history anyway,
counts it again once.

:func:`parse_overflow` recognises a provider's "the prompt is too long" error (OpenAI's
``context_length_exceeded``, Anthropic's "prompt is too long", and the wording of compatible
servers) and reads the sizes it names.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

import attrs
import orjson

from ._messages import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from ._provider import ToolSpec

DEFAULT_CONTEXT_WINDOW: Final = 128_000
"""The window of a model this table does not know (most current models have at least this)."""
DEFAULT_CHARS_PER_TOKEN: Final = 4.0
"""The ratio used before the first report (English prose and code average 3-4)."""
_MIN_RATIO: Final = 0.5
_MAX_RATIO: Final = 16.0

# First match wins: more specific names come before the family they belong to. Windows are the
# input limits the providers enforce (for gpt-5 the input cap, not the 400k total).
_WINDOWS: Final[tuple[tuple[re.Pattern[str], int], ...]] = tuple(
    (re.compile(pattern), window)
    for pattern, window in (
        (r"claude-(2|instant)", 100_000),
        (r"claude", 200_000),
        (r"gpt-5", 272_000),
        (r"gpt-4\.1", 1_047_576),
        (r"gpt-4o|gpt-4\.5|gpt-4-turbo|gpt-4-\d{4}-preview|chatgpt-4o", 128_000),
        (r"gpt-4-32k", 32_768),
        (r"gpt-4", 8_192),
        (r"gpt-3\.5-turbo-instruct", 4_096),
        (r"gpt-3\.5", 16_385),
        (r"(^|[^a-z0-9])o1-mini", 128_000),
        (r"(^|[^a-z0-9])o[134](-|$)", 200_000),
        (r"gemini-1\.5-pro", 2_097_152),
        (r"gemini", 1_048_576),
        (r"llama-?3\.[1-3]|llama-?4", 131_072),
        (r"llama", 8_192),
        (r"qwen-?3", 40_960),
        (r"qwen|qwq", 32_768),
        (r"mistral-(large|medium|small|nemo)|codestral|ministral|pixtral|devstral", 131_072),
        (r"mistral|mixtral", 32_768),
        (r"deepseek", 65_536),
        (r"gemma-?3", 131_072),
        (r"gemma", 8_192),
        (r"phi-?4", 16_384),
        (r"command-[ra]", 128_000),
        (r"grok", 131_072),
    )
)


def context_window_for(model: str) -> int:
    """The context window of *model* (tokens), from the table of known families.

    The name is matched case-insensitively after the last ``/`` (so ``openrouter/anthropic/…``
    and ``meta-llama/Llama-3.1-8B`` work); an unknown model gets :data:`DEFAULT_CONTEXT_WINDOW`.
    """
    name = model.rsplit("/", 1)[-1].lower().replace("_", "-")
    for pattern, window in _WINDOWS:
        if pattern.search(name):
            return window
    return DEFAULT_CONTEXT_WINDOW


def block_chars(block: object) -> int:
    """How many characters *block* puts into a request (its text, or its input as JSON)."""
    if isinstance(block, ToolResultBlock):
        return len(block.content) + 16
    if isinstance(block, TextBlock | ThinkingBlock):
        return len(block.text)
    if isinstance(block, ToolUseBlock):
        return len(block.name) + len(orjson.dumps(block.input)) + 16
    return 0


def message_chars(message: Message) -> int:
    """How many characters *message* puts into a request (its blocks plus a little framing)."""
    size = 8
    for block in message.content:  # a loop: this runs for every message of every turn
        size += block_chars(block)
    return size


def history_chars(messages: Sequence[Message]) -> int:
    """:func:`message_chars` over a whole history (O(history): for compaction, not per turn)."""
    return sum(message_chars(m) for m in messages)


def fixed_chars(system: str, tools: Sequence[ToolSpec]) -> int:
    """The characters every request of an agent carries besides its messages."""
    return len(system) + sum(len(t.name) + len(t.description) + _schema_chars(t) for t in tools)


# Every agent of a run sends the same few schemas (a tool's schema is one dict, shared); encoding
# them for each agent that starts was most of what starting the meter cost.
_SCHEMA_CHARS: dict[int, tuple[object, int]] = {}


def _schema_chars(spec: ToolSpec) -> int:
    schema = spec.input_schema
    hit = _SCHEMA_CHARS.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    size = len(orjson.dumps(schema))
    if len(_SCHEMA_CHARS) >= 1024:
        _SCHEMA_CHARS.clear()
    _SCHEMA_CHARS[id(schema)] = (schema, size)  # the schema itself keeps its id from reuse
    return size


class ContextMeter:
    """One agent's context size and window, kept in O(new messages) per turn.

    Call :meth:`sync` with the history before each request (it counts what was appended since
    the last call), :meth:`reported` with the input tokens the provider reported for that
    request, and :meth:`reset` after the history was rewritten (a compaction).

    Args:
        window: the model's context window in tokens.
        fixed: characters every request carries besides the messages (system prompt, tools).
    """

    def __init__(self, window: int, *, fixed: int = 0) -> None:
        self.window = window
        self.ratio = DEFAULT_CHARS_PER_TOKEN
        """Characters per token, calibrated by the provider's reports."""
        self._fixed = fixed
        self._chars = fixed  # fixed + every counted message
        self._counted = 0  # how many messages are in _chars
        self._last: Message | None = None  # the last counted message, as counted
        self._last_chars = 0
        self._request_chars = fixed  # _chars when the last request was built
        self._base_tokens: int | None = None  # tokens reported (or set) at _base_chars
        self._base_chars = fixed

    @property
    def chars(self) -> int:
        """Characters of the history counted so far, the fixed part included."""
        return self._chars

    @property
    def tokens(self) -> int:
        """The estimated size of the context as last synced, in tokens."""
        if self._base_tokens is None:
            return round(self._chars / self.ratio)
        return self._base_tokens + round((self._chars - self._base_chars) / self.ratio)

    @property
    def calibrated(self) -> bool:
        """Whether a provider report (or a reset) anchors the size."""
        return self._base_tokens is not None

    def sync(self, messages: Sequence[Message]) -> int:
        """Count the messages appended since the last call; return :attr:`tokens`.

        Only the last message counted before may have changed since (a user message joined to
        a trailing one); anything else means the history was rewritten, and it is counted anew.
        """
        n = len(messages)
        counted = self._counted
        if n < counted:
            self._recount(messages)
        else:
            if counted and messages[counted - 1] is not self._last:
                changed = messages[counted - 1]
                if _same_prefix(changed, self._last):
                    size = message_chars(changed)
                    self._chars += size - self._last_chars
                    self._last, self._last_chars = changed, size
                else:  # rewritten behind our back: count it all once
                    self._recount(messages)
                    counted = n
            for message in messages[counted:]:
                size = message_chars(message)
                self._chars += size
                self._last, self._last_chars = message, size
            self._counted = n
        self._request_chars = self._chars
        return self.tokens

    def reported(self, input_tokens: int) -> None:
        """The provider reported *input_tokens* for the request built at the last :meth:`sync`.

        A report of 0 (a provider that does not say) changes nothing.
        """
        if input_tokens <= 0:
            return
        self._base_tokens = input_tokens
        self._base_chars = self._request_chars
        self.ratio = min(_MAX_RATIO, max(_MIN_RATIO, self._request_chars / input_tokens))

    def reset(self, messages: Sequence[Message], *, tokens: int | None = None) -> int:
        """Count a rewritten history from scratch; its size is *tokens* if known, else estimated.

        Returns:
            The new size in tokens.
        """
        self._recount(messages)
        self._request_chars = self._chars
        if tokens is not None:
            self._base_tokens, self._base_chars = tokens, self._chars
        elif self._base_tokens is not None:
            self._base_tokens, self._base_chars = round(self._chars / self.ratio), self._chars
        return self.tokens

    def learn_window(self, limit: int) -> None:
        """The provider named a smaller window than the table's: believe it."""
        if 0 < limit < self.window:
            self.window = limit

    def _recount(self, messages: Sequence[Message]) -> None:
        self._chars = self._fixed + history_chars(messages)
        self._counted = len(messages)
        self._last = messages[-1] if messages else None
        self._last_chars = message_chars(self._last) if self._last is not None else 0


def _same_prefix(now: Message, before: Message | None) -> bool:
    # A trailing user message that had blocks appended to it (a queued message delivered at a
    # turn boundary) is the same message grown, not a rewrite.
    return (
        before is not None
        and now.role == before.role
        and now.content[: len(before.content)] == before.content
    )


# -- "the prompt is too long" ----------------------------------------------------------------


@attrs.frozen
class Overflow:
    """What a "too long" error said: the prompt's size and the limit, when it named them."""

    tokens: int | None = None
    limit: int | None = None


_OVERFLOW_HINTS: Final = re.compile(
    r"context_length_exceeded|maximum context length|prompt is too long|context window"
    r"|exceeds? (?:the )?(?:available )?context|exceed_context_size|context limit"
    r"|input token count .{0,40}exceeds|input tokens exceed|too many (?:input )?tokens"
    r"|reduce the length of the messages|prompt (?:is )?too large|context size has been exceeded"
    r"|maximum number of tokens allowed",
    re.IGNORECASE,
)
_NUM = r"(\d[\d,]*)"
_SIZE_PATTERNS: Final[tuple[tuple[re.Pattern[str], str], ...]] = tuple(
    (re.compile(p, re.IGNORECASE), order)
    for p, order in (
        # Anthropic: "prompt is too long: 208310 tokens > 200000 maximum"
        (rf"{_NUM} tokens? > {_NUM}", "tl"),
        # Anthropic: "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000"
        (rf"{_NUM} \+ \d[\d,]* > {_NUM}", "tl"),
        # OpenAI / vLLM: "maximum context length is 8192 tokens. However, your messages
        # resulted in 8227 tokens" / "you requested 8554 tokens (7554 in the messages, ...)"
        (
            rf"maximum context length is {_NUM} tokens.{{0,40}}?(?:resulted in|requested) {_NUM}",
            "lt",
        ),
        # Mistral: "Prompt contains 40000 tokens ... too large for model with 32768 maximum"
        (rf"contains {_NUM} tokens.{{0,80}}?with {_NUM} maximum", "tl"),
        # Gemini: "The input token count (1200000) exceeds the maximum number of tokens
        # allowed (1048576)"
        (rf"input token count \({_NUM}\).{{0,60}}?allowed \({_NUM}\)", "tl"),
        # llama.cpp fields, when the raw body is given: "n_prompt_tokens":5000,"n_ctx":4096
        (rf"\"n_prompt_tokens\"\s*:\s*{_NUM}.{{0,80}}?\"n_ctx\"\s*:\s*{_NUM}", "tl"),
        (rf"maximum context length is {_NUM}", "l"),
        (rf"context (?:window|length|limit) of {_NUM}", "l"),
        (rf"configured limit of {_NUM}", "l"),
    )
)


def parse_overflow(text: str) -> Overflow | None:
    """An :class:`Overflow` when *text* (an error message or body) says the prompt is too long.

    Returns:
        ``None`` for any other error; else the sizes it names (either may be unknown).
    """
    if not _OVERFLOW_HINTS.search(text):
        return None
    for pattern, order in _SIZE_PATTERNS:
        found = pattern.search(text)
        if found is None:
            continue
        numbers = [int(g.replace(",", "")) for g in found.groups()]
        if order == "tl":
            return Overflow(tokens=numbers[0], limit=numbers[1])
        if order == "lt":
            return Overflow(tokens=numbers[1], limit=numbers[0])
        return Overflow(limit=numbers[0])
    return Overflow()
