"""Fan-outs against a server that enforces rate limits per key (docs/rate-limits.md).

Real parts throughout: the providers over httpx on loopback, against
:class:`tests.ratelimit_server.RateLimitedServer`, which refuses what its token buckets cannot
take as the real APIs do. Wall-clock times are real (the server's buckets run on trio's clock).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import trio

from runtime import AgentFinished, Event, open_runtime
from tests.ratelimit_server import RateLimitedServer

KEY = "sk-ratelimit-test-key-0123456789"


@attrs.frozen
class FanOut:
    """What one fan-out did: how its agents ended, how long it took, what the server saw."""

    statuses: list[str]
    wall_s: float
    stats: dict[str, Any]
    events: list[Event]

    @property
    def completed(self) -> int:
        return self.statuses.count("completed")


async def fan_out(
    server: RateLimitedServer,
    n: int,
    workspace: Path,
    *,
    rate_limits: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> FanOut:
    """A root agent that starts *n* sub-agents at once through the real provider."""
    provider = server.mode
    var = "OPENAI" if provider == "openai" else "ANTHROPIC"
    env = {f"{var}_BASE_URL": server.url, f"{var}_API_KEY": KEY}
    events: list[Event] = []
    server.reset()
    extra: dict[str, Any] = dict(kwargs)
    if rate_limits is not None:
        extra["rate_limits"] = rate_limits
    t0 = trio.current_time()
    async with open_runtime(provider, model="m", env=env, workspace=workspace, trace=False,
                            on_event=events.append, **extra) as rt:
        outcome = await rt.run(f"FANOUT {n}")
    wall = trio.current_time() - t0
    statuses = [e.status for e in events if isinstance(e, AgentFinished)]
    assert outcome.status in statuses
    return FanOut(statuses, wall, server.stats.as_json(), events)


async def test_thirty_parallel_sub_agents_against_ten_requests_a_second_all_complete(
    workspace: Path,
) -> None:
    async with trio.open_nursery() as nursery:
        server = await nursery.start(RateLimitedServer(rps=10).serve)
        run = await fan_out(server, 30, workspace)
        nursery.cancel_scope.cancel()
    # 32 requests at 10 a second, the first 10 at once: the server cannot serve them in less
    # than 2.2 s.
    assert run.completed == 31, (run.statuses, run.stats)
    assert run.wall_s < 1.5 * 3.2, run.wall_s
