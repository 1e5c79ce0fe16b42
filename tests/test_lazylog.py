"""LazyLogger: a structlog logger bound only when a line is logged."""

from __future__ import annotations

import copy
import logging
import pickle
from collections.abc import Generator
from contextlib import contextmanager
from typing import Any

import structlog

from runtime.core._lazylog import LazyLogger


@contextmanager
def capture_logs() -> Generator[list[Any], None, None]:
    """Every entry, at every level (the shared conftest keeps only errors and resets after)."""
    capture = structlog.testing.LogCapture()
    structlog.configure(
        processors=[capture], wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG)
    )
    yield capture.entries


def test_a_line_logged_through_it_carries_every_bound_key() -> None:
    log = LazyLogger(structlog.get_logger("trio_agents"), run_id="r1")
    agent = log.bind(agent_id="agent-2", parent_tool_use_id=None)
    tool = agent.bind(tool_use_id="tu-1", tool="bash", agent_id="agent-3")
    with capture_logs() as lines:
        tool.info("bash.started", pid=7)
        agent.warning("slow")
    assert lines == [
        {"run_id": "r1", "agent_id": "agent-3", "parent_tool_use_id": None,
         "tool_use_id": "tu-1", "tool": "bash", "pid": 7, "event": "bash.started",
         "log_level": "info"},
        {"run_id": "r1", "agent_id": "agent-2", "parent_tool_use_id": None,
         "event": "slow", "log_level": "warning"},
    ]


def test_binding_makes_no_structlog_logger_until_a_line_is_logged() -> None:
    made: list[dict[str, object]] = []

    class Base:
        def bind(self, **context: object) -> structlog.typing.FilteringBoundLogger:
            made.append(context)
            return structlog.get_logger().bind(**context)

    log = LazyLogger(Base(), run_id="r").bind(agent_id="a").bind(tool_use_id="t")
    assert made == []
    with capture_logs():
        log.debug("one")
        log.debug("two")
    assert made == [{"run_id": "r", "agent_id": "a", "tool_use_id": "t"}]


def test_copies_and_private_names_do_not_reach_the_logger() -> None:
    log = LazyLogger(structlog.get_logger("x"), run_id="r")
    assert copy.copy(log).bind(a=1)._context == {"run_id": "r", "a": 1}
    assert pickle.loads(pickle.dumps(log))._context == {"run_id": "r"}
