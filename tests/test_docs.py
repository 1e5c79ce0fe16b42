"""The docs in docs/ are the project's contract: they live in the repository and stay true to the code.

- No file cites a document outside the repository; every ``docs/…`` citation and every relative
  Markdown link resolves, anchors included.
- docs/events.md documents every event class with every field and its JSON type.
- docs/cli.md names every command, subcommand and option the parsers accept.
- docs/tools.md lists every built-in tool with every key of its input.
- README.md links every page of docs/.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import attrs
import pytest

from runtime.core._events import EVENT_TYPES, Event

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

# Written in two pieces so that this file does not cite them itself.
_OUTSIDE = [
    (re.compile(r"\b" + "SP" + r"EC\b"), "the contract that lived outside the repository"),
    (re.compile(r"\b" + "STY" + r"LE\.md\b"), "the house style that lives outside the repository"),
    (re.compile("/work/" + r"(?:shared|coord)\b"), "a folder of the development machine"),
]
_TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".json", ".cfg", ".ini", ".yml", ".yaml", ".sh"}
_SKIP_DIRS = {".git", ".venv", "__pycache__", "build", "dist", ".trio-agents", ".hypothesis"}
# `docs/<page>.md` or `docs/<page>.md#<anchor>`, not as the tail of a longer path (`src/docs/a.md`).
_CITATION = re.compile(r"(?<![\w/.-])docs/([\w.-]+\.md)(?:#([\w-]+))?")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _repo_files() -> list[Path]:
    """The repository's text files: tracked or new, not ignored (a walk without git)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout.decode()
        names = [n for n in out.split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = []
        for folder, dirs, files in os.walk(ROOT):
            dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and not d.endswith(".egg-info")]
            names += [os.path.relpath(os.path.join(folder, f), ROOT) for f in files]
    paths = [ROOT / n for n in names]
    return sorted(
        p for p in paths if p.is_file() and (p.suffix in _TEXT_SUFFIXES or p.parent.name == ".ci")
    )


def _slug(heading: str) -> str:
    """A heading's anchor, as GitHub makes it: lower case, punctuation dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _headings(path: Path) -> list[tuple[int, str]]:
    """(level, text) of the Markdown headings of *path*, fenced code left out."""
    out = []
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        m = _HEADING.match(line)
        if m and not fenced:
            out.append((len(m.group(1)), m.group(2)))
    return out


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for _, text in _headings(path):
        slug = _slug(text)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def _section(path: Path, heading: str) -> str:
    """The text under *heading* (exact heading text), up to the next heading of its level or above."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[str] = []
    level = None
    for line in lines:
        m = _HEADING.match(line)
        if level is None:
            if m and m.group(2) == heading:
                level = len(m.group(1))
            continue
        if m and len(m.group(1)) <= level:
            break
        out.append(line)
    assert level is not None, f"{path.name} has no heading {heading!r}"
    return "\n".join(out)


def _table_rows(text: str) -> dict[str, list[str]]:
    """The rows of the Markdown tables in *text*, by the name in their first cell (backticks off)."""
    rows = {}
    for line in text.splitlines():
        if not line.startswith("|") or line.startswith("|---"):
            continue
        # `a\|b` in a cell is one cell.
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        key = cells[0].strip("`")
        rows[key] = cells[1:]
    return rows


# --------------------------------------------------------------------------- citations


def test_no_file_cites_a_document_outside_the_repository() -> None:
    faults = []
    for path in _repo_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for pattern, what in _OUTSIDE:
            for m in pattern.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                faults.append(f"{path.relative_to(ROOT)}:{line}: {m.group(0)!r} ({what})")
    assert not faults, "cite docs/ instead:\n" + "\n".join(faults)


def test_every_docs_citation_resolves() -> None:
    """``docs/<page>.md#<anchor>`` must name a page and one of its headings, anywhere; outside
    tests/ (where ``docs/<name>.md`` is also a workspace path in permission-rule tests) a plain
    ``docs/<page>.md`` must name a page."""
    faults = []
    anchors = {p.name: _anchors(p) for p in DOCS.glob("*.md")}
    for path in _repo_files():
        rel = path.relative_to(ROOT)
        in_tests = rel.parts[0] == "tests"
        text = path.read_text(encoding="utf-8", errors="replace")
        for m in _CITATION.finditer(text):
            page, anchor = m.group(1), m.group(2)
            where = f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
            if page not in anchors:
                if anchor is not None or not in_tests:
                    faults.append(f"{where}: no such page")
            elif anchor is not None and anchor not in anchors[page]:
                faults.append(f"{where}: no such section")
    assert not faults, "\n".join(faults)


_BENCH_CITATION = re.compile(r'bench/README\.md, "([^"]+)"')


def test_every_bench_section_cited_in_the_code_exists() -> None:
    """A comment citing ``bench/README.md, "<section>"`` names the start of one of its headings
    (a citation may wrap across comment or docstring lines)."""
    headings = [text for _, text in _headings(ROOT / "bench" / "README.md")]
    faults = []
    for root in ("runtime", "tools"):
        for path in sorted((ROOT / root).rglob("*.py")):
            text = re.sub(r"\s*\n\s*(?:#\s*)?", " ", path.read_text(encoding="utf-8"))
            faults.extend(
                f"{path.relative_to(ROOT)}: {m.group(0)}: no such section"
                for m in _BENCH_CITATION.finditer(text)
                if not any(h.startswith(m.group(1)) for h in headings)
            )
    assert not faults, "\n".join(faults)


def test_relative_markdown_links_stay_in_the_repository_and_resolve() -> None:
    faults = []
    for path in _repo_files():
        if path.suffix != ".md":
            continue
        text = path.read_text(encoding="utf-8")
        for m in _LINK.finditer(text):
            target = m.group(1)
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(ROOT)}: ({target})"
            if not dest.is_relative_to(ROOT):
                faults.append(f"{where}: outside the repository")
            elif not dest.exists():
                faults.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                faults.append(f"{where}: no such section")
    assert not faults, "\n".join(faults)


def test_the_readme_links_every_page_of_docs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in sorted(DOCS.glob("*.md")) if f"](docs/{p.name})" not in readme]
    assert not missing, f"README.md does not link {missing}"


# --------------------------------------------------------------------------- events


def _json_type(hint: Any) -> str:
    """How docs/events.md writes the JSON type of a field annotated *hint*."""
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        rest = [a for a in args if a is not type(None)]
        assert len(rest) == 1, hint
        return f"{_json_type(rest[0])} or null"
    if typing.get_origin(hint) is Literal:
        assert all(isinstance(a, str) for a in args), hint
        return "string"
    origin = typing.get_origin(hint) or hint
    if origin is list:
        return f"array of {_json_type(args[0])}s"
    names = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object"}
    assert origin in names, f"no JSON type for {hint!r}: add it to the test"
    return names[origin]


def _fields(cls: type[Event]) -> dict[str, str]:
    hints = typing.get_type_hints(cls)
    return {f.name: _json_type(hints[f.name]) for f in attrs.fields(cls)}


def test_events_md_documents_every_field_every_event_has() -> None:
    common = _fields(Event)
    rows = _table_rows(_section(DOCS / "events.md", "Fields every event has"))
    assert rows.get("type", [None])[0] == "string"
    for name, json_type in common.items():
        assert name in rows, f"docs/events.md: common field {name!r} is not documented"
        assert rows[name][0] == json_type, (
            f"docs/events.md: {name} is {json_type}, not {rows[name][0]}"
        )


@pytest.mark.parametrize("kind", sorted(EVENT_TYPES))
def test_events_md_documents_every_event_type_with_all_its_fields(kind: str) -> None:
    cls = EVENT_TYPES[kind]
    common = set(_fields(Event))
    own = {k: v for k, v in _fields(cls).items() if k not in common}
    rows = _table_rows(_section(DOCS / "events.md", kind))
    for name, json_type in own.items():
        assert name in rows, f"docs/events.md, {kind}: field {name!r} is not documented"
        assert rows[name][0] == json_type, (
            f"docs/events.md, {kind}.{name}: the code says {json_type}, the doc {rows[name][0]}"
        )
    extra = set(rows) - set(own) - {"field"}
    assert not extra, f"docs/events.md, {kind}: documents fields the event does not have: {extra}"


def test_events_md_documents_no_event_type_the_code_does_not_have() -> None:
    kinds = _section(DOCS / "events.md", "Kinds")
    documented = {m.group(1) for m in re.finditer(r"^### (\S+)$", kinds, re.MULTILINE)}
    assert documented == set(EVENT_TYPES)


# --------------------------------------------------------------------------- command line


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> Iterator[str]:
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
            continue
        yield from (s for s in action.option_strings if s.startswith("--"))


def _commands() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command as the user types it after ``trio-agents``, with its parser."""
    from runtime.cli._main import build_parser
    from runtime.cli._trace_cmd import _parser as trace_parser

    stack: list[tuple[str, argparse.ArgumentParser]] = [("", build_parser())]
    while stack:
        command, parser = stack.pop(0)
        if command == "trace":  # a placeholder: the trace commands have their own parser
            parser = trace_parser()
        yield command, parser
        stack += [(f"{command} {name}".strip(), sub) for name, sub in _subcommands(parser).items()]


def test_cli_md_documents_every_command_and_option() -> None:
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    headings = {h for _, h in _headings(DOCS / "cli.md")}
    faults = []
    for command, parser in _commands():
        if command:
            if f"trio-agents {command}" not in text:
                faults.append(f"`trio-agents {command}` is not in docs/cli.md")
            named = rf"(?<![\w-]){re.escape(command)}(?![\w-])"
            if not any(re.search(named, h) for h in headings):
                faults.append(f"docs/cli.md has no section on '{command}'")
        faults.extend(
            f"{option} of `trio-agents {command}` is not in docs/cli.md"
            for option in _options(parser)
            if not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text)
        )
    assert not faults, "\n".join(faults)


def test_cli_md_lists_the_exit_codes_the_commands_use() -> None:
    from runtime.cli import _options

    rows = _table_rows(_section(DOCS / "cli.md", "Exit codes"))
    codes = [_options.EXIT_OK, _options.EXIT_FAILED, _options.EXIT_USAGE, _options.EXIT_ABORTED,
             _options.EXIT_TERMINATED]
    assert [str(c) for c in codes] == [k for k in rows if k != "code"]


# --------------------------------------------------------------------------- tools


def test_tools_md_lists_every_builtin_tool_with_every_input_key() -> None:
    from tools import builtin_tools

    rows = _table_rows((DOCS / "tools.md").read_text(encoding="utf-8"))
    for tool in builtin_tools():
        assert tool.name in rows, f"docs/tools.md does not list the {tool.name} tool"
        documented = rows[tool.name][0]
        for key in tool.input_schema.get("properties", {}):
            assert f"`{key}`" in documented, f"docs/tools.md: {tool.name} input {key!r} missing"
