"""The parts of a run's set-up made cheap for issue 20 give what the straightforward way gives:
the workspace's real path, the scanned environment, the budget layer's counting."""

from __future__ import annotations

import os
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from runtime import ConfigError, open_runtime
from runtime.core._secrets import run_environ, scan_env, scan_run_environ
from runtime.wiring import _open
from runtime.wiring._open import _real_folder

# -- the workspace's real path ----------------------------------------------------------------

# A small tree of folders and symlinks (relative and absolute, chains, to files, dangling).
_LINKS = st.lists(
    st.tuples(
        st.sampled_from(["l1", "a/l2", "a/b/l3", "l4"]),
        st.sampled_from(["a", "a/b", "../a", "b", "/", "l1", "a/l2", "f", "missing", ".", ".."]),
        st.booleans(),  # absolute target
    ),
    max_size=4,
    unique_by=lambda t: t[0],
)
_PATHS = st.sampled_from(
    ["a", "a/b", "l1", "a/l2", "a/b/l3", "l4", "l1/b", "a/l2/..", "a/./b/", "f", "missing", "."]
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(links=_LINKS, path=_PATHS, fallback=st.booleans())
def test_the_real_folder_is_realpath_or_the_same_refusal(
    tmp_path: Path, links: list[tuple[str, str, bool]], path: str, fallback: bool
) -> None:
    root = Path(os.path.realpath(tmp_path)) / f"case{abs(hash((tuple(links), path)))}"
    (root / "a" / "b").mkdir(parents=True, exist_ok=True)
    (root / "f").write_text("a file")
    for name, target, absolute in links:
        where = root / name
        if where.is_symlink() or where.exists():
            continue
        where.parent.mkdir(parents=True, exist_ok=True)
        where.symlink_to(str(root / target) if absolute else target)
    given_path = str(root / path)
    expected_ok = os.path.isdir(given_path)
    saved = _open._O_PATH
    if fallback:
        _open._O_PATH = None
    try:
        if expected_ok:
            assert _real_folder(given_path) == os.path.realpath(given_path)
        else:
            with pytest.raises(ConfigError, match="is not a folder"):
                _real_folder(given_path)
    finally:
        _open._O_PATH = saved


def test_the_real_folder_expands_the_home_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "proj").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path))
    assert _real_folder("~/proj") == os.path.realpath(tmp_path / "proj")
    assert _real_folder(Path("~") / "proj") == os.path.realpath(tmp_path / "proj")


async def test_a_run_in_a_symlinked_workspace_reports_the_real_path(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to("real")
    real = Path(os.path.realpath(tmp_path / "real"))  # noqa: ASYNC240 - a test's set-up
    scenario = {"agents": {"main": {"turns": [{"text": "ok"}]}}}
    async with open_runtime(scenario=scenario, workspace=tmp_path / "link", trace=False) as rt:
        assert rt.workspace == real


async def test_a_workspace_that_is_a_file_or_missing_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    for bad in (tmp_path / "file", tmp_path / "missing"):
        with pytest.raises(ConfigError, match=r"workspace .* is not a folder"):
            async with open_runtime(scenario={"agents": {}}, workspace=bad, trace=False):
                pass


# -- the scanned environment ------------------------------------------------------------------


def test_scan_run_environ_follows_the_environment_and_hands_out_copies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for allow in ((), ("MY_*",)):
        assert scan_run_environ(allow) == scan_env(run_environ(), allow)
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-0123456789abcdef")
    filtered, secrets = scan_run_environ()
    assert "MY_SERVICE_TOKEN" not in filtered
    assert "tok-0123456789abcdef" in secrets
    assert scan_run_environ(["MY_*"])[0]["MY_SERVICE_TOKEN"] == "tok-0123456789abcdef"
    filtered["INJECTED"] = "1"  # the caller's own copy: the next run does not see it
    assert "INJECTED" not in scan_run_environ()[0]
    monkeypatch.delenv("MY_SERVICE_TOKEN")
    filtered, secrets = scan_run_environ()
    assert "tok-0123456789abcdef" not in secrets
    assert (filtered, secrets) == scan_env(run_environ(), ())


async def test_a_run_masks_a_secret_set_after_an_earlier_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    scenario = {"agents": {"main": {"turns": [{"text": "the key is sk-live-0123456789abcdef"}]}}}
    async with open_runtime(scenario=scenario, workspace=tmp_path, trace=False) as rt:
        first = await rt.run("go")
    assert first.result == "the key is sk-live-0123456789abcdef"
    monkeypatch.setenv("SERVICE_API_KEY", "sk-live-0123456789abcdef")
    async with open_runtime(scenario=scenario, workspace=tmp_path, trace=False) as rt:
        second = await rt.run("go")
    assert second.result == "the key is ***"


async def test_an_empty_env_given_is_the_runs_environment_not_the_processs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # env={} is a choice (a run that must see no key), not "the default".
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-process-0123456789")
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        async with open_runtime("openai", env={}, workspace=tmp_path, trace=False):
            pass
