"""Streaming throughput of a provider against its floor, on loopback.

The loopback test server (tests/llm_server.py) streams one turn of N text deltas. The *value*
is the rate (SSE events per second) at which the provider turns that stream into items; the
*floor* is the rate of iterating the very same stream with httpx + httpx-sse doing nothing else.
Both run several rounds, alternating, in the same process on one client; the best round of each
counts. Time is the process's CPU time (``time.process_time``: the client, the in-process server
and the kernel's loopback work), so other load on a shared machine does not skew the ratio; on
an idle machine it equals wall time, since nothing here waits. Prints one JSON object:

    {"name": ..., "value": ..., "floor": ..., "ratio": ..., "unit": "events/s", ...}

Usage: ``python bench/bench_provider.py [--provider openai|anthropic] [--deltas N] [--rounds R]``
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import aclosing
from pathlib import Path

import httpx
import httpx_sse
import trio

# The loopback test server lives with the tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from llm_server import (
    LLMServer,
    Piece,
    Reply,
    anthropic_text_stream,
    openai_text_stream,
)

from runtime.core._messages import Message, TextBlock
from runtime.core._provider import ModelRequest, TextChunk
from runtime.providers import AnthropicProvider, OpenAIProvider

_WRITE = 64 * 1024


def _reply(provider: str, deltas: int) -> tuple[Reply, int]:
    texts = [f"tok{i} " for i in range(deltas)]
    events = openai_text_stream(texts) if provider == "openai" else anthropic_text_stream(texts)
    body = b"".join(events)
    pieces = [Piece(body[i : i + _WRITE]) for i in range(0, len(body), _WRITE)]
    return Reply(pieces=pieces), len(events)


async def _floor(client: httpx.AsyncClient, url: str) -> int:
    count = 0
    async with httpx_sse.aconnect_sse(client, "POST", url, content=b"{}") as source:
        async for _ in source.aiter_sse():
            count += 1
    return count


async def _provider(provider: OpenAIProvider | AnthropicProvider, request: ModelRequest) -> int:
    count = 0
    async with aclosing(provider.stream(request)) as items:
        async for item in items:
            count += isinstance(item, TextChunk)
    return count


async def main(provider_name: str, deltas: int, rounds: int) -> dict[str, object]:
    server = LLMServer()
    reply, events = _reply(provider_name, deltas)
    request = ModelRequest(
        model="bench",
        system="",
        messages=(Message(role="user", content=(TextBlock(text="go"),)),),
        tools=(),
        agent_type="main",
        agent_id="bench",
    )
    best_floor = best_value = 0.0
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        async with httpx.AsyncClient() as client:
            provider: OpenAIProvider | AnthropicProvider
            if provider_name == "openai":
                provider = OpenAIProvider(client=client, base_url=server.url + "/v1")
                url = server.url + "/v1/chat/completions"
            else:
                provider = AnthropicProvider(client=client, base_url=server.url)
                url = server.url + "/v1/messages"
            for _ in range(rounds):
                # Alternate, so drift (CPU frequency, a noisy neighbour) hits both alike.
                server.push(reply)
                start = time.process_time()
                seen = await _floor(client, url)
                best_floor = max(best_floor, seen / (time.process_time() - start))
                assert seen == events, (seen, events)
                server.push(reply)
                start = time.process_time()
                texts = await _provider(provider, request)
                best_value = max(best_value, events / (time.process_time() - start))
                assert texts == deltas, (texts, deltas)
        nursery.cancel_scope.cancel()
    return {
        "name": f"provider_stream_{provider_name}",
        "value": round(best_value),
        "floor": round(best_floor),
        "ratio": round(best_value / best_floor, 3),
        "unit": "events/s",
        "clock": "process_time",
        "deltas": deltas,
        "rounds": rounds,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--provider", choices=("openai", "anthropic"), default="openai")
    parser.add_argument("--deltas", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    print(json.dumps(trio.run(main, args.provider, args.deltas, args.rounds)))
