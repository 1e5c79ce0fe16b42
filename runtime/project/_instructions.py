"""Project instructions: ``AGENTS.md`` / ``CLAUDE.md`` files and their ``@path`` imports.

Which files, in this order (later files are nearer the work, and so weigh more):

1. the user's own: ``AGENTS.md``, then ``CLAUDE.md``, in the user's config folder;
2. the project's: in each folder from the repository root down to the workspace (only the
   workspace when it is not in a git repository): ``AGENTS.md``, ``CLAUDE.md``,
   ``.claude/CLAUDE.md``.

Each file is followed by the files it imports. An import is ``@path`` after a space or at the
start of a line, outside code spans and fenced code blocks, as Claude Code reads them: relative
to the importing file (``@~/x`` is in the home folder), up to :data:`MAX_IMPORT_DEPTH` hops. A
path that does not name an existing file is prose (``@someone``) and is left alone. A file is
included once, however many times it is found or imported; a file importing one of its own
importers is an import cycle, reported and not followed.

Imports are confined: the user's files may import only from the user's config folder, the
project's only from the project root (the repository root, or the workspace); a path that leads
out (``..``, a symlink, an absolute path) is refused with a warning, as file tools refuse it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import attrs

from ._files import ProjectFileError, foreign_owner, inside, read_text_capped

MAX_IMPORT_DEPTH = 5
MAX_FILE_BYTES = 64 * 1024
MAX_TOTAL_BYTES = 256 * 1024
MAX_FILES = 64
PROJECT_NAMES = ("AGENTS.md", "CLAUDE.md", ".claude/CLAUDE.md")
USER_NAMES = ("AGENTS.md", "CLAUDE.md")


@attrs.frozen
class InstructionFile:
    """One file of instructions, as it goes into the system prompt.

    Attributes:
        path: where it was read (absolute).
        scope: ``user`` or ``project``.
        text: its contents (cut at the cap when ``truncated``).
        imported_by: the file whose ``@path`` brought it in, if any.
    """

    path: Path
    scope: str
    text: str
    truncated: bool = False
    imported_by: Path | None = None


_FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_TICKS = re.compile(r"`+")
_IMPORT = re.compile(r"(?:^|(?<=\s))@((?:[^\s\\]|\\ )+)")
_TRAILING = ".,;:!?)]}\"'"


def find_imports(text: str) -> list[str]:
    """The ``@path`` references of a Markdown text, in order (code spans and blocks skipped)."""
    text = _without_code_spans(_without_fenced_blocks(text))
    out = []
    for m in _IMPORT.finditer(text):
        ref = m[1].replace("\\ ", " ").split("#", 1)[0]
        if ref and not ref.startswith("@"):
            out.append(ref)
    return out


def _without_fenced_blocks(text: str) -> str:
    # Line by line (a regex here backtracks badly on some inputs): a fence of three or more
    # backticks or tildes opens a block that the same fence, as long or longer, closes; an
    # unclosed block runs to the end.
    kept: list[str] = []
    fence = ""
    for line in text.split("\n"):
        m = _FENCE_LINE.match(line)
        if fence:
            if m and m[1][0] == fence[0] and len(m[1]) >= len(fence) and not line[m.end():].strip():
                fence = ""
        elif m and not (m[1][0] == "`" and "`" in line[m.end():]):
            fence = m[1]
        else:
            kept.append(line)
    return "\n".join(kept)


def _without_code_spans(text: str) -> str:
    # A run of N backticks opens a span that the next run of exactly N closes (CommonMark);
    # an unmatched run is plain text. Linear: each length's runs are visited in order once.
    runs = [(m.start(), m.end()) for m in _TICKS.finditer(text)]
    by_length: dict[int, list[int]] = {}
    for i, (start, end) in enumerate(runs):
        by_length.setdefault(end - start, []).append(i)
    cursor = dict.fromkeys(by_length, 0)
    out: list[str] = []
    pos = 0
    i = 0
    while i < len(runs):
        start, end = runs[i]
        if start < pos:
            i += 1
            continue
        same = by_length[end - start]
        k = cursor[end - start]
        while k < len(same) and same[k] <= i:
            k += 1
        cursor[end - start] = k
        if k == len(same):
            i += 1
            continue
        close = same[k]
        out.append(text[pos:start])
        pos = runs[close][1]
        i = close + 1
    out.append(text[pos:])
    return "".join(out)


def _candidates(ref: str, base: Path) -> list[Path]:
    p = Path(ref).expanduser() if ref.startswith("~") else Path(ref)
    first = p if p.is_absolute() else base / p
    out = [first]
    stripped = ref.rstrip(_TRAILING)
    if stripped and stripped != ref:  # "see @README." in prose
        out += _candidates(stripped, base)
    return out


@attrs.define
class _Loader:
    warn: Callable[[str], None]
    files: list[InstructionFile] = attrs.Factory(list)
    seen: set[Path] = attrs.Factory(set)
    total: int = 0

    def load(self, path: Path, scope: str, root: Path, *, chain: tuple[Path, ...] = (),
             imported_by: Path | None = None, ref: str = "") -> None:
        real = path.resolve()
        if real in chain:
            cycle = " -> ".join(str(p) for p in (*chain[chain.index(real):], real))
            self.warn(f"{imported_by}: import cycle ({cycle}); not followed")
            return
        if not inside(path, root):
            what = f"{imported_by}: import @{ref}" if imported_by else str(path)
            self.warn(f"{what}: leads out of {root}; refused")
            return
        if real in self.seen:
            return
        if len(self.files) >= MAX_FILES:
            self.warn(f"{path}: more than {MAX_FILES} instruction files; the rest are skipped")
            return
        self.seen.add(real)
        room = MAX_TOTAL_BYTES - self.total
        if room <= 0:
            self.warn(f"{path}: instructions over {MAX_TOTAL_BYTES // 1024} KiB in all; skipped")
            return
        cap = min(MAX_FILE_BYTES, room)
        try:
            content = read_text_capped(path, cap, root=root)
        except ProjectFileError as exc:
            self.warn(f"{exc}; skipped")
            return
        if content.truncated:
            self.warn(
                f"{path}: {content.size} bytes; only the first {cap // 1024} KiB are used"
            )
        self.total += len(content.text.encode())
        self.files.append(
            InstructionFile(path, scope, content.text, content.truncated, imported_by)
        )
        refs = find_imports(content.text)
        if refs and len(chain) >= MAX_IMPORT_DEPTH:
            self.warn(f"{path}: imports deeper than {MAX_IMPORT_DEPTH} hops are not followed")
            return
        for ref in refs:
            target = next((c for c in _candidates(ref, path.parent) if c.is_file()), None)
            if target is None:  # not a file: prose such as "@someone", or a missing file
                continue
            self.load(target, scope, root, chain=(*chain, real), imported_by=path, ref=ref)


def load_instructions(
    workspace: Path,
    project_root: Path,
    user_dir: Path,
    warn: Callable[[str], None],
) -> list[InstructionFile]:
    """Read the instruction files for *workspace* (see the module docstring for which and in
    what order), with their imports, within the size caps.

    Args:
        project_root: the repository root holding *workspace*, or *workspace* itself.
        user_dir: the user's config folder.
        warn: called with one line for each file skipped, cut or refused.
    """
    loader = _Loader(warn)
    for name in USER_NAMES:
        path = user_dir / name
        if path.is_file():
            loader.load(path, "user", user_dir)
    folders = [workspace]
    if workspace != project_root and project_root in workspace.parents:
        folders += [p for p in workspace.parents if p == project_root or project_root in p.parents]
    for folder in reversed(folders):
        if folder != workspace and (uid := foreign_owner(folder)) is not None:
            # Above the workspace, a folder of another user's is not the user's project
            # (git's safe.directory rule): its instructions could be anyone's.
            loader.warn(
                f"{folder}: owned by another user (uid {uid}); its instruction files are skipped"
            )
            continue
        for name in PROJECT_NAMES:
            path = folder / name
            if path.is_file():
                loader.load(path, "project", project_root)
    return loader.files
