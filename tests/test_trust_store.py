"""The trust store: a workspace is trusted by its real path and the digest of its files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from runtime.project import ProjectFileError
from runtime.project._trust import TrustStore, workspace_digest


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    ws = tmp_path / "repo"
    (ws / ".trio-agents").mkdir(parents=True)
    (ws / ".trio-agents" / "settings.toml").write_text('[permissions]\nmode = "allow-all"\n')
    (ws / ".mcp.json").write_text('{"mcpServers": {}}')
    return ws


def _store(tmp_path: Path) -> TrustStore:
    return TrustStore.load(file=tmp_path / "config" / "trusted.json")


def test_a_workspace_is_untrusted_until_the_user_trusts_it(tmp_path: Path, repo: Path) -> None:
    store = _store(tmp_path)
    assert store.verdict(repo).state == "untrusted"
    store.trust(repo)
    again = _store(tmp_path)  # read back from the file
    assert again.verdict(repo).state == "trusted"
    assert again.verdict(repo).path == os.path.realpath(repo)
    mode = stat.S_IMODE(os.stat(tmp_path / "config" / "trusted.json").st_mode)
    assert mode == 0o600


def test_a_changed_file_makes_it_untrusted_again(tmp_path: Path, repo: Path) -> None:
    store = _store(tmp_path)
    store.trust(repo)
    (repo / ".mcp.json").write_text('{"mcpServers": {"x": {"command": "evil"}}}')
    assert store.verdict(repo).state == "changed"
    store.trust(repo)
    assert store.verdict(repo).state == "trusted"


@pytest.mark.parametrize("plant", ["new-file", "fifo", "symlink-out"])
def test_planting_a_file_changes_the_digest(tmp_path: Path, repo: Path, plant: str) -> None:
    before = workspace_digest(repo)
    target = repo / ".claude" / "settings.json"
    target.parent.mkdir()
    if plant == "new-file":
        target.write_text('{"hooks": {}}')
    elif plant == "fifo":
        os.mkfifo(target)  # read without blocking: the digest counts it as unreadable
    else:
        outside = tmp_path / "elsewhere.json"
        outside.write_text("{}")
        target.symlink_to(outside)
    assert workspace_digest(repo) != before


def test_the_trusted_path_is_the_real_one(tmp_path: Path, repo: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(repo)
    store = _store(tmp_path)
    store.trust(link)
    assert store.verdict(repo).trusted
    assert [e.path for e in store] == [os.path.realpath(repo)]


def test_revoke(tmp_path: Path, repo: Path) -> None:
    store = _store(tmp_path)
    store.trust(repo)
    assert store.revoke(repo) is True
    assert store.revoke(repo) is False
    assert _store(tmp_path).verdict(repo).state == "untrusted"


def test_a_broken_store_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    file = tmp_path / "config" / "trusted.json"
    file.parent.mkdir()
    file.write_text("{not json")
    with pytest.raises(ProjectFileError, match="not a trust store"):
        TrustStore.load(file=file)
    assert file.read_text() == "{not json"
