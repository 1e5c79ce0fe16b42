"""Skills: ``NAME/SKILL.md`` folders, loaded on demand by the ``skill`` tool.

Where: ``skills/`` in the user's config folder, then ``.claude/skills/`` and
``.trio-agents/skills/`` in the workspace (a later skill of the same name wins, with a warning).
``SKILL.md`` starts with YAML front matter: ``name`` (default: the folder's name) and
``description`` (required: it is all the model sees until it loads the skill). Only names and
descriptions go into the system prompt; the body is read when the model calls ``skill``.
Claude Code's ``allowed-tools`` is ignored: a skill grants no permission.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

import attrs

from ._files import ProjectFileError, inside, read_text_capped, split_front_matter

SKILL_FILE = "SKILL.md"
MAX_SKILL_BYTES = 256 * 1024
MAX_SKILLS = 256
MAX_DESCRIPTION_CHARS = 1024
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@attrs.frozen
class Skill:
    """A skill found on disk (its body is read only when loaded).

    Attributes:
        folder: the skill's folder (its other files are there).
        root: the folder it must stay in (the workspace or the user's config folder).
    """

    name: str
    description: str
    folder: Path
    root: Path

    @property
    def path(self) -> Path:
        return self.folder / SKILL_FILE

    def body(self) -> str:
        """The text of ``SKILL.md`` after its front matter (cut at the size cap).

        Raises:
            ProjectFileError: unreadable now, or led out of its root.
        """
        return split_front_matter(self.read(SKILL_FILE), self.path).body

    def read(self, relative: str) -> str:
        """A file of the skill's folder, by its path in it (confined to the folder, capped).

        Raises:
            ProjectFileError: not in the folder, not a file, unreadable or not text.
        """
        target = self.folder / relative
        if not inside(target, self.folder) or not inside(target, self.root):
            raise ProjectFileError(f"{relative}: not a file of skill {self.name}")
        content = read_text_capped(target, MAX_SKILL_BYTES, fd=self._open(relative))
        note = f"\n[cut: the file has {content.size} bytes]" if content.truncated else ""
        return content.text + note

    def _open(self, relative: str) -> int:
        """Open *relative* in the skill's folder as the file tools open files: walked from the
        root's descriptor without following a link out of it or into the runtime's own files,
        checked to be in the folder, and opened by the descriptor that was checked (a folder
        swapped for a link in between cannot redirect it)."""
        from runtime.core import ToolError, locate

        folder = self.folder.relative_to(self.root).as_posix()
        try:
            with locate(self.root, folder) as place:
                where = place.parts
            with locate(self.root, f"{folder}/{relative}") as place:
                if place.parts[: len(where)] != where or len(place.parts) == len(where):
                    raise ProjectFileError(f"{relative}: not a file of skill {self.name}")
                fd = place.open(os.O_RDONLY)
        except ToolError as exc:
            raise ProjectFileError(f"{relative}: {exc}") from None
        except OSError as exc:
            raise ProjectFileError(
                f"{relative}: no such file in skill {self.name}"
                if isinstance(exc, FileNotFoundError)
                else f"{relative}: cannot read: {exc.strerror or exc}"
            ) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ProjectFileError(f"{relative}: no such file in skill {self.name}")
        return fd


def read_skill(folder: Path, root: Path) -> Skill:
    """The skill in *folder*.

    Raises:
        ProjectFileError: no ``SKILL.md``, bad front matter, no description.
    """
    path = folder / SKILL_FILE
    if not path.is_file():
        raise ProjectFileError(f"{folder}: a skill folder without {SKILL_FILE}")
    if not inside(path, root):
        raise ProjectFileError(f"{path}: leads out of {root}")
    content = read_text_capped(path, MAX_SKILL_BYTES, root=root)
    fm = split_front_matter(content.text, path)
    name = fm.data.get("name", folder.name)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ProjectFileError(f"{path}: name {name!r}: expected letters, digits, '-', '_', '.'")
    desc = fm.data.get("description")
    if not isinstance(desc, str) or not desc.strip():
        raise ProjectFileError(f"{path}: no description in the front matter")
    desc = " ".join(desc.split())
    if len(desc) > MAX_DESCRIPTION_CHARS:
        desc = desc[: MAX_DESCRIPTION_CHARS - 1] + "…"
    return Skill(name=name, description=desc, folder=folder, root=root)


def load_skills(
    places: Iterable[tuple[Path, Path]], warn: Callable[[str], None]
) -> list[Skill]:
    """The skills in each ``(skills folder, root)`` of *places*, in order; see the module
    docstring. A folder that is not a usable skill is skipped with a warning."""
    found: dict[str, Skill] = {}
    count = 0
    for skills_dir, root in places:
        try:
            folders = sorted(skills_dir.iterdir()) if skills_dir.is_dir() else []
        except OSError as exc:
            warn(f"{skills_dir}: cannot list: {exc.strerror or exc}; skipped")
            continue
        for folder in folders:
            if not folder.is_dir() or folder.name.startswith("."):
                continue
            count += 1
            if count > MAX_SKILLS:
                warn(f"{skills_dir}: more than {MAX_SKILLS} skills; the rest are skipped")
                return list(found.values())
            try:
                skill = read_skill(folder, root)
            except ProjectFileError as exc:
                warn(f"{exc}; skipped")
                continue
            old = found.pop(skill.name, None)
            if old is not None:
                warn(f"skill {skill.name!r} is in {old.folder} and {folder}; {folder} is used")
            found[skill.name] = skill
    return list(found.values())
