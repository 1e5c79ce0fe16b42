"""The neutral conversation history every provider converts to and from its wire format.

A history is a list of :class:`Message`; an assistant message's tool calls are
:class:`ToolUseBlock` blocks, answered by :class:`ToolResultBlock` blocks in the next user
message, in call order. :class:`AgentState` is an agent's whole state, serialisable with
:data:`state_converter`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, TypeAlias

import attrs
import cattrs
from cattrs.preconf.orjson import make_converter


@attrs.frozen(kw_only=True)
class TextBlock:
    kind: ClassVar[str] = "text"
    text: str


@attrs.frozen(kw_only=True)
class ThinkingBlock:
    """Model reasoning. ``signature`` is kept for APIs that need it sent back (Anthropic)."""

    kind: ClassVar[str] = "thinking"
    text: str
    signature: str | None = None


@attrs.frozen(kw_only=True)
class ToolUseBlock:
    kind: ClassVar[str] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]


@attrs.frozen(kw_only=True)
class ToolResultBlock:
    kind: ClassVar[str] = "tool_result"
    tool_use_id: str
    content: str
    is_error: bool = False


Block: TypeAlias = TextBlock | ThinkingBlock | ToolUseBlock | ToolResultBlock
Role: TypeAlias = Literal["user", "assistant"]


@attrs.frozen(kw_only=True)
class Message:
    role: Role
    content: tuple[Block, ...]

    @property
    def text(self) -> str:
        """The concatenated text blocks."""
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def tool_uses(self) -> tuple[ToolUseBlock, ...]:
        return tuple(b for b in self.content if isinstance(b, ToolUseBlock))


@attrs.define(kw_only=True)
class AgentState:
    """Everything one agent knows; serialisable (sessions, debugging).

    Attributes:
        continue_reason: why the loop went round again last time (``tool_use``,
            ``user_message``), or ``None`` before the first turn / after the last.
    """

    agent_id: str
    name: str
    depth: int
    system: str = ""
    messages: list[Message] = attrs.Factory(list)
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    continue_reason: str | None = None
    cost_usd: float | None = 0.0
    """What its model calls cost so far in US dollars; None once one had no price."""


state_converter: cattrs.Converter = make_converter(forbid_extra_keys=False)
_BLOCKS: dict[str, type[Block]] = {
    c.kind: c for c in (TextBlock, ThinkingBlock, ToolUseBlock, ToolResultBlock)
}


def _unstructure_block(block: Block) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": block.kind}
    out.update(attrs.asdict(block, recurse=False))
    return out


def _structure_block(obj: Any, _: Any) -> Block:
    if not isinstance(obj, dict) or obj.get("kind") not in _BLOCKS:
        raise ValueError(f"not a content block: {obj!r:.80}")
    cls = _BLOCKS[obj["kind"]]
    fields = {k: v for k, v in obj.items() if k != "kind"}
    block: Block = state_converter.structure(fields, cls)
    return block


state_converter.register_unstructure_hook(Block, _unstructure_block)
state_converter.register_structure_hook(Block, _structure_block)
for _c in _BLOCKS.values():
    state_converter.register_unstructure_hook(_c, _unstructure_block)
