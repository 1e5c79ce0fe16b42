"""Shared fixtures."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog


@pytest.fixture(autouse=True)
def _quiet_logs() -> Iterator[None]:
    # Library logs go nowhere in tests unless a test captures them itself.
    structlog.configure(
        processors=[structlog.processors.KeyValueRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(40),
        logger_factory=structlog.PrintLoggerFactory(),
        cache_logger_on_first_use=False,
    )
    yield
    structlog.reset_defaults()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture(autouse=True)
def user_config_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    # Each test gets its own $XDG_CONFIG_HOME, never the user's: the session key lives there,
    # and so do the user's settings, AGENTS.md, agents and skills, which must not change what a
    # test (or a command it starts) sees.
    config = tmp_path_factory.mktemp("config")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    # Claude Code's user folder (~/.claude: its settings' hooks run) likewise.
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config / "claude"))
    return config


@pytest.fixture
def trust() -> Any:
    """``trust(folder)``: the test's user trusts *folder* as it is now (docs/configuration.md,
    "Trust"): its own settings file may then loosen, its .mcp.json servers start. Call it after
    writing the workspace's files (a change afterwards makes it untrusted again)."""
    from runtime.project._trust import TrustStore

    def trust_folder(folder: Path) -> None:
        TrustStore.load().trust(folder)

    return trust_folder


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """One local Ray cluster on loopback for every test of a module that asks for it (runs
    find it initialised); a cluster this process is already connected to is used as it is."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[dev]')")
    from runtime.cluster._placement import _init_ray
    from runtime.core import ConfigError

    if ray.is_initialized():  # someone else's cluster: use it, leave it
        yield
        return
    try:
        _init_ray(ray, None, 2)
    except ConfigError as exc:
        pytest.skip(f"a local Ray cluster cannot start on this machine: {exc}")
    try:
        yield
    finally:
        ray.shutdown()
