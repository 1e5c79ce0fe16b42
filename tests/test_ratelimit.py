"""The endpoint limiter on its own, in virtual time (runtime/providers/_ratelimit.py,
docs/rate-limits.md); the fan-outs against a real server are in test_ratelimit_e2e.py."""

from __future__ import annotations

import logging
import math
import random
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
import structlog
import trio
import trio.testing

from runtime import ConfigError, open_runtime
from runtime.providers import EndpointLimiter, RateLimit, check_rate_limits, open_provider
from runtime.providers._ratelimit import MAX_PAUSE_S, _reset_s, endpoint_label


@pytest.fixture
def logs() -> list[MutableMapping[str, Any]]:
    capture = structlog.testing.LogCapture()
    structlog.configure(
        processors=[capture], wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG)
    )
    return capture.entries


def _limiter(**limit: Any) -> EndpointLimiter:
    return EndpointLimiter("http://x/v1", limit=RateLimit(**limit), rng=random.Random(0))


async def _go(limiter: EndpointLimiter, name: str, order: list[tuple[str, float]],
              asked_at: float | None = None, tokens: int = 0) -> None:
    ticket = limiter.ask(tokens, asked_at=trio.current_time() if asked_at is None else asked_at)
    await limiter.wait(ticket)
    order.append((name, trio.current_time()))
    limiter.done(ticket)


async def test_calls_go_in_the_order_they_asked_at_the_configured_rate(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = _limiter(rpm=60)  # one a second, one at once
    order: list[tuple[str, float]] = []
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        for name in "abcd":
            nursery.start_soon(_go, limiter, name, order)
            await trio.testing.wait_all_tasks_blocked()
    assert [(n, t - start) for n, t in order] == [("a", 0), ("b", 1), ("c", 2), ("d", 3)]


async def test_the_wait_foreseen_is_the_place_in_line_at_the_rate(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = _limiter(rpm=120)  # two a second, 1.8 at once (a tenth of a second kept in hand)
    tickets = [limiter.ask(0, asked_at=trio.current_time() + i) for i in range(5)]
    assert [t.wait_s for t in tickets] == pytest.approx([0, 0.1, 0.6, 1.1, 1.6])
    assert {t.reason for t in tickets[2:]} == {"requests"}


async def test_a_refusal_pauses_everyone_and_the_refused_call_keeps_its_place(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = _limiter(rpm=600)
    start = trio.current_time()
    first = limiter.ask(0, asked_at=start)
    await limiter.wait(first)
    # Its reply is a 429 asking for 2 s; meanwhile a later call asks.
    pause = limiter.refused(first, 429, 2.0)
    limiter.done(first)
    assert 2.0 <= pause <= 2.2
    order: list[tuple[str, float]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_go, limiter, "later", order, start + 0.5)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(_go, limiter, "refused", order, start)  # asks again, first in line
    assert [n for n, _ in order] == ["refused", "later"]
    assert order[0][1] - start == pytest.approx(pause + 0.1)  # the pause, and the margin
    assert order[1][1] - order[0][1] == pytest.approx(0.1)  # then at the rate, 10 a second
    assert limiter.refusals == 1


async def test_probe_first_sends_one_call_alone_until_the_limits_are_known(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = EndpointLimiter("http://x/v1", limit=RateLimit(probe_first=True))
    probe = limiter.ask(0, asked_at=trio.current_time())
    await limiter.wait(probe)
    order: list[tuple[str, float]] = []
    async with trio.open_nursery() as nursery:
        for name in "abc":
            nursery.start_soon(_go, limiter, name, order)
            await trio.testing.wait_all_tasks_blocked()
        assert order == [], "the others wait for the first reply's headers"
        # The reply says 600 a minute and 1 left (the probe took one): one goes now, the
        # others at 10 a second.
        limiter.learn(probe, {"x-ratelimit-limit-requests": "600",
                              "x-ratelimit-remaining-requests": "1"})
    t0 = order[0][1]
    assert [(n, round(t - t0, 3)) for n, t in order] == [("a", 0), ("b", 0.1), ("c", 0.2)]
    assert limiter.rates() == {"requests": 10.0}


async def _first_calls_admitted_at_once(limiter: EndpointLimiter) -> int:
    """How many of three first calls, asked together, go before any reply is read."""
    tickets = [limiter.ask(0, asked_at=trio.current_time()) for _ in range(3)]
    async with trio.open_nursery() as nursery:
        for ticket in tickets:
            nursery.start_soon(limiter.wait, ticket)
        await trio.testing.wait_all_tasks_blocked()
        admitted = limiter.in_flight
        nursery.cancel_scope.cancel(reason="counted")
    return admitted


async def test_with_no_rate_information_every_first_call_goes_at_once() -> None:
    optimistic = EndpointLimiter("http://x/v1")
    assert await _first_calls_admitted_at_once(optimistic) == 3
    assert await _first_calls_admitted_at_once(
        EndpointLimiter("http://x/v1", limit=RateLimit(probe_first=True))
    ) == 1
    # A refusal still pauses every call and sets a pace (docs/rate-limits.md): half the
    # rate sent in the last second (three calls).
    probe = optimistic.ask(0, asked_at=trio.current_time())
    assert optimistic.refused(probe, 429, 1.0) >= 1.0
    optimistic.done(probe)
    assert optimistic.rates()["requests"] == pytest.approx(1.5)


@pytest.mark.parametrize(
    "base_url", ["http://127.0.0.1:9/v1", "http://localhost:9/v1", "https://api.example.com/v1"]
)
@pytest.mark.parametrize("probe_first", [False, True])
async def test_the_first_calls_go_the_same_way_wherever_the_server_is(
    base_url: str, probe_first: bool
) -> None:
    env = {"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "k"}
    limits = {"openai": {"probe_first": True}} if probe_first else None
    async with open_provider("openai", env=env, rate_limits=limits) as provider:  # no call
        limiter = provider.limiter
        assert limiter is not None
        assert await _first_calls_admitted_at_once(limiter) == (1 if probe_first else 3)


async def test_the_first_headers_that_say_little_remains_hold_back_what_has_not_gone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = EndpointLimiter("http://x/v1")
    first = [limiter.ask(0, asked_at=trio.current_time()) for _ in range(5)]
    for ticket in first:
        await limiter.wait(ticket)  # nothing known: all five go at once
    assert limiter.in_flight == 5
    # The first reply (of the first call sent) says 60 a minute, none left: the four sent
    # after it are owed too, so the next call waits for five requests' worth, at one a second.
    limiter.learn(first[0], {"x-ratelimit-limit-requests": "60",
                             "x-ratelimit-remaining-requests": "0"})
    later = limiter.ask(0, asked_at=trio.current_time())
    assert (later.reason, later.wait_s) == ("requests", pytest.approx(5.1))
    start = trio.current_time()
    await limiter.wait(later)
    assert trio.current_time() - start == pytest.approx(5.1)


@pytest.mark.parametrize(("retry_after", "pause"), [(None, 0.5), (1.0, 1.0)])
async def test_a_bursts_refusals_are_one_back_off_not_one_each(
    autojump_clock: trio.testing.MockClock, retry_after: float | None, pause: float
) -> None:
    limiter = EndpointLimiter("http://x/v1", rng=random.Random(0))
    burst = [limiter.ask(0, asked_at=trio.current_time()) for _ in range(10)]
    for ticket in burst:
        await limiter.wait(ticket)
    # Nine of the ten are refused, one after another, as their replies come in.
    pauses = []
    for ticket in burst[1:]:
        pauses.append(limiter.refused(ticket, 429, retry_after))
        limiter.done(ticket)
        await trio.sleep(0.01)
    assert limiter.refusals == 9
    # One step of the back-off for the burst (0.5 s without Retry-After, not 8), plus jitter;
    # each refusal's pause ends about when the first one's does.
    assert pause <= pauses[0] <= pause * 1.1
    assert all(p <= pauses[0] for p in pauses[1:])
    # A try sent after the burst and refused again is the next step in a row.
    limiter.done(burst[0])
    await trio.sleep(pauses[0])
    again = limiter.ask(0, asked_at=trio.current_time())
    await limiter.wait(again)
    expected = 2 * pause if retry_after is None else pause
    assert expected <= limiter.refused(again, 429, retry_after) <= expected * 1.1


async def test_a_server_without_rate_limit_headers_is_not_limited(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = EndpointLimiter("http://x/v1", limit=RateLimit(probe_first=True))
    probe = limiter.ask(0, asked_at=trio.current_time())
    await limiter.wait(probe)
    limiter.learn(probe, {"content-type": "text/event-stream"})  # the probe's reply says none
    tickets = [limiter.ask(0, asked_at=trio.current_time()) for _ in range(50)]
    with trio.fail_after(0.001):
        for ticket in tickets:
            await limiter.wait(ticket)
    assert limiter.in_flight == 51


async def test_a_configured_limit_lower_than_the_servers_wins(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = _limiter(rpm=60)
    ticket = limiter.ask(0, asked_at=trio.current_time())
    await limiter.wait(ticket)
    limiter.learn(ticket, {"anthropic-ratelimit-requests-limit": "6000",
                           "anthropic-ratelimit-input-tokens-limit": "60000"})
    assert limiter.rates() == {"requests": 1.0, "input_tokens": 1000.0}


async def test_reported_usage_corrects_the_token_bucket(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = _limiter(tpm=60_000)  # 1,000 tokens a second, 900 at most
    start = trio.current_time()
    first = limiter.ask(400, asked_at=start)
    await limiter.wait(first)
    limiter.settle(first, 400, 1_600)  # it really used 2,000: a debt of 1,000
    limiter.done(first)
    order: list[tuple[str, float]] = []
    await _go(limiter, "next", order, tokens=100)
    # The bucket (500 left after the reservation) went to -1,100; 100 tokens are there again
    # after 1.2 s.
    assert order[0][1] - start == pytest.approx(1.2)


async def test_a_cancelled_waiting_call_leaves_the_queue_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = _limiter(rpm=60)
    order: list[tuple[str, float]] = []
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_go, limiter, "a", order)
        await trio.testing.wait_all_tasks_blocked()
        with trio.CancelScope() as doomed:
            nursery.start_soon(_go, limiter, "c", order, start + 2)
            # "b" is second in line; cancel it while it waits.
            async with trio.open_nursery() as inner:
                inner.start_soon(_go, limiter, "b", order, start + 1)
                await trio.testing.wait_all_tasks_blocked()
                assert limiter.waiting == 2
                inner.cancel_scope.cancel()
            assert limiter.waiting == 1
            assert trio.current_time() == start
        assert not doomed.cancelled_caught
    assert [(n, t - start) for n, t in order] == [("a", 0), ("c", 1)]


async def test_nonsense_headers_are_clamped_and_logged_once(
    autojump_clock: trio.testing.MockClock, logs: list[MutableMapping[str, Any]]
) -> None:
    limiter = _limiter()
    for _ in range(3):
        ticket = limiter.ask(0, asked_at=trio.current_time())
        with trio.fail_after(MAX_PAUSE_S * 1.2):
            await limiter.wait(ticket)
        limiter.learn(ticket, {"x-ratelimit-limit-requests": "600",
                               "x-ratelimit-remaining-requests": "-7",
                               "x-ratelimit-reset-requests": "-3s"})
        pause = limiter.refused(ticket, 429, 2 * 86400.0)
        limiter.done(ticket)
        assert MAX_PAUSE_S <= pause <= MAX_PAUSE_S * 1.1
    shown = [(e["header"], e["value"], e["action"]) for e in logs
             if e["event"] == "ratelimit.header_nonsense"]
    assert shown == [
        ("x-ratelimit-remaining-requests", "-7", "taken as 0"),
        ("x-ratelimit-reset-requests", "-3s", "ignored"),
        ("retry-after", "172800.0", "clamped to 60 s"),
    ]


def test_resets_are_read_as_openai_and_anthropic_write_them() -> None:
    assert _reset_s("20ms") == pytest.approx(0.02)
    assert _reset_s("1m30.5s") == pytest.approx(90.5)
    assert _reset_s("6s") == 6
    assert _reset_s("2099-01-01T00:00:00Z") is not None
    assert _reset_s("2001-01-01T00:00:00Z") is None  # in the past
    assert _reset_s("soon") is None


def test_an_endpoint_is_named_without_its_key() -> None:
    key = "sk-live-0123456789abcdef"
    label = endpoint_label("https://api.openai.com/v1", key)
    assert key not in label
    assert label.startswith("https://api.openai.com/v1 (key #")


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"openai": {"rpm": -5}}, "rate_limits: openai.rpm: expected a number above 0; got -5"),
        ({"openai": {"tpm": 0}}, "rate_limits: openai.tpm: expected a number above 0; got 0"),
        ({"anthropic": {"max_concurrent": 2.5}},
         "rate_limits: anthropic.max_concurrent: expected a whole number above 0; got 2.5"),
        ({"openai": {"rps": 5}},
         "rate_limits: openai.rps: unknown key; the keys are rpm, tpm, max_concurrent, "
         "probe_first, min_concurrent, min_rpm"),
        ({"openai": {"min_concurrent": 0}},
         "rate_limits: openai.min_concurrent: expected a whole number above 0; got 0"),
        ({"openai": {"min_rpm": -1}},
         "rate_limits: openai.min_rpm: expected a number above 0; got -1"),
        ({"openai": {"min_concurrent": 9, "max_concurrent": 8}},
         "rate_limits: openai.min_concurrent: above max_concurrent (9 > 8)"),
        ({"openai": {"probe_first": 1}},
         "rate_limits: openai.probe_first: expected true or false; got 1"),
        ({"gemini": {"rpm": 5}},
         "rate_limits: 'gemini': an endpoint is openai, anthropic or a base URL (http(s)://…)"),
        ({"openai": 5}, "rate_limits: openai: expected a table of rpm, tpm, max_concurrent, "
         "probe_first, min_concurrent, min_rpm; got 5"),
    ],
)
def test_bad_limits_are_one_line_naming_the_setting(table: Any, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_rate_limits(table)
    assert str(info.value) == message


def test_limits_by_base_url_and_by_provider() -> None:
    limits = check_rate_limits({"openai": {"rpm": 5}, "http://proxy:8080/v1/": {"tpm": 9}})
    assert limits["openai"] == RateLimit(rpm=5)
    assert limits["http://proxy:8080/v1/"] == RateLimit(tpm=9)
    assert check_rate_limits({"openai": {"probe_first": True}})["openai"] == RateLimit(
        probe_first=True
    )


async def test_open_runtime_refuses_bad_limits_before_anything_opens(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^rate_limits: openai\.rpm: expected a number"):
        async with open_runtime("openai", env={"OPENAI_API_KEY": "k"}, workspace=tmp_path,
                                trace=False, rate_limits={"openai": {"rpm": 0}}):
            pass


def test_a_bad_rate_limit_in_a_settings_file_is_one_line_and_exit_2(
    workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from runtime.cli._main import main

    (workspace / ".trio-agents").mkdir()
    (workspace / ".trio-agents" / "settings.toml").write_text(
        '[rate_limits.openai]\nrpm = -5\n'
    )
    assert main(["run", "hi", "--workspace", str(workspace), "--no-trace"]) == 2
    _, err = capsys.readouterr()
    file = workspace / ".trio-agents" / "settings.toml"
    assert err.splitlines() == [
        f"trio-agents: error: {file}:1: rate_limits: openai.rpm: expected a number above 0; "
        "got -5"
    ]


def test_rate_limits_from_a_settings_file_reach_the_run(workspace: Path) -> None:
    from runtime.cli._options import options_from_settings, run_config
    from runtime.project import load_settings

    (workspace / ".trio-agents").mkdir()
    (workspace / ".trio-agents" / "settings.toml").write_text(
        '[rate_limits.openai]\nrpm = 500\n\n[rate_limits."http://127.0.0.1:9/v1"]\ntpm = 90\n'
    )
    settings = load_settings(workspace)
    assert settings["rate_limits"] == (("openai", (("rpm", 500),)),
                                       ("http://127.0.0.1:9/v1", (("tpm", 90),)))
    config = run_config(options_from_settings(settings))
    assert config.rate_limits == {"openai": {"rpm": 500}, "http://127.0.0.1:9/v1": {"tpm": 90}}


def test_rate_limit_flags_add_to_the_files_a_later_key_winning(workspace: Path) -> None:
    from runtime.cli._main import build_parser
    from runtime.cli._options import flags_from_args, options_from_settings, run_config
    from runtime.project import load_settings

    (workspace / ".trio-agents").mkdir()
    (workspace / ".trio-agents" / "settings.toml").write_text(
        '[rate_limits.openai]\nrpm = 500\ntpm = 90000\n\n[rate_limits.anthropic]\nrpm = 50\n'
    )
    ns = build_parser().parse_args([
        "run", "hi", "--rate-limit", "openai:rpm=60,max_concurrent=8",
        "--rate-limit", "http://127.0.0.1:9/v1:tpm=1.5e3,probe_first=true",
        "--rate-limit", "anthropic:min_concurrent=2,min_rpm=30"])
    settings = load_settings(workspace, flags=flags_from_args(ns))
    config = run_config(options_from_settings(settings))
    assert config.rate_limits == {
        "openai": {"rpm": 60, "tpm": 90000, "max_concurrent": 8},
        "anthropic": {"rpm": 50, "min_concurrent": 2, "min_rpm": 30},
        "http://127.0.0.1:9/v1": {"tpm": 1500.0, "probe_first": True},
    }
    assert settings.source("rate_limits").endswith("; flag --rate-limit")


@pytest.mark.parametrize(("flag", "message"), [
    ("openai:rpm=-5", "openai.rpm: expected a number above 0; got -5"),
    ("openai:rps=5",
     "openai.rps: unknown key; the keys are rpm, tpm, max_concurrent, probe_first, "
     "min_concurrent, min_rpm"),
    ("openai:probe_first=yes", "openai.probe_first: expected true or false; got 'yes'"),
    ("openai:max_concurrent=2.5", "openai.max_concurrent: expected a whole number above 0; got 2.5"),
    ("openai:rpm=lots", "openai.rpm: expected a number; got 'lots'"),
    ("gemini:rpm=5", "'gemini': an endpoint is openai, anthropic or a base URL (http(s)://…)"),
    ("openai", "expected NAME:KEY=N,… (openai:rpm=500,tpm=200000); got 'openai'"),
])
def test_a_bad_rate_limit_flag_is_one_line_naming_it_and_exit_2(
    workspace: Path, capsys: pytest.CaptureFixture[str], flag: str, message: str
) -> None:
    from runtime.cli._main import main

    with pytest.raises(SystemExit) as exit_:
        main(["run", "hi", "--workspace", str(workspace), "--no-trace", "--rate-limit", flag])
    assert exit_.value.code == 2
    _, err = capsys.readouterr()
    assert err.splitlines() == [
        f"trio-agents: error: argument --rate-limit: {message} (see trio-agents run --help)"]


def test_the_trace_page_says_what_a_wait_was() -> None:
    from runtime.trace._view import describe

    refused = describe({"type": "rate_limited", "wait_s": 1.5, "reason": "refused", "status": 429})
    assert refused == "waits 1.5s for the rate limit (refused, HTTP 429)"
    paced = describe({"type": "rate_limited", "wait_s": 0.25, "reason": "requests", "status": None})
    assert paced == "waits 250ms for the rate limit (requests)"


# -- the learned pace: additive increase, multiplicative decrease ------------------------------


async def _admit(limiter: EndpointLimiter, n: int) -> list[Any]:
    """*n* calls asked together; those the limiter lets go at once (the rest keep waiting)."""
    tickets = [limiter.ask(0, asked_at=trio.current_time()) for _ in range(n)]
    out = []
    for ticket in tickets:
        with trio.move_on_after(0):
            await limiter.wait(ticket)
        if ticket.admitted:
            out.append(ticket)
    return out


def _succeed(limiter: EndpointLimiter, tickets: list[Any]) -> None:
    for ticket in tickets:
        limiter.settle(ticket, 0, 0)
        limiter.done(ticket)


def _refuse(limiter: EndpointLimiter, tickets: list[Any], retry_after: float = 1.0) -> None:
    for ticket in tickets:
        limiter.refused(ticket, 429, retry_after)
        limiter.done(ticket)


async def test_a_burst_of_refusals_narrows_the_window_to_what_the_server_took(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """20 first calls, 12 refused (a server that takes 8 at once): the window becomes the 8
    still out, and the rate half the 20 sent in the last second."""
    limiter = _limiter()
    assert limiter.window == math.inf
    out = await _admit(limiter, 20)
    assert len(out) == 20
    _refuse(limiter, out[8:])
    assert limiter.window == 8
    assert limiter.rates() == {"requests": pytest.approx(10.0)}
    await trio.sleep(2.5)  # the pause, and the learned rate's bucket full again (9)
    assert await _admit(limiter, 1) == []  # the server's 8 are still out
    # As they answer, the window widens by one over its size per success: 8 + 8/8.5 < 9.
    _succeed(limiter, out[:8])
    assert 8.9 < limiter.window < 9
    assert len(await _admit(limiter, 20)) == 8


async def test_successes_widen_the_window_and_a_full_window_refused_is_halved(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = _limiter()
    out = await _admit(limiter, 10)
    _refuse(limiter, out[4:])
    assert limiter.window == 4
    rate = limiter.rates()["requests"]
    _succeed(limiter, out[:4])
    answered = 4
    await trio.sleep(1.2)
    for _ in range(20):  # a window's worth at once, widened as each answers
        batch = await _admit(limiter, int(limiter.window) + 1)
        assert len(batch) <= int(limiter.window)
        _succeed(limiter, batch)
        answered += len(batch)
        await trio.sleep(1)
    # w += 1/w per success: w² grows by 2 and a crumb (1/w²) each, from 2² at the burst.
    assert 4 + 2 * answered <= limiter.window**2 <= 4 + 2.1 * answered
    assert limiter.rates()["requests"] > rate  # the learned rate sped up too
    # The server refuses when the window is full: the window halves, the rate holds.
    wide = limiter.window
    full = await _admit(limiter, int(wide))
    rate = limiter.rates()["requests"]
    _refuse(limiter, full[-1:])
    assert limiter.window == int(wide) / 2  # half the calls out
    assert limiter.rates()["requests"] == rate
    _succeed(limiter, full[:-1])


async def test_refusals_below_a_full_window_halve_the_learned_rate_and_successes_speed_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A server that takes few calls a second, each answered at once: the window does not fill
    (one out at a time), so the refusal says the rate was too high."""
    limiter = _limiter()
    out = await _admit(limiter, 4)
    _refuse(limiter, out[1:])  # the first burst: the window is the one still out
    assert limiter.window == 1
    _succeed(limiter, out[:1])
    await trio.sleep(2)
    for _ in range(12):  # one at a time, as the learned rate lets them
        [one] = await _admit_one(limiter)
        _succeed(limiter, [one])
    before = limiter.rates()["requests"]
    [one] = await _admit_one(limiter)
    window = limiter.window
    _refuse(limiter, [one])
    assert limiter.window == window  # one out, the window not full: the rate was the bound
    assert limiter.rates()["requests"] < before / 2 + 0.2


async def _admit_one(limiter: EndpointLimiter) -> list[Any]:
    ticket = limiter.ask(0, asked_at=trio.current_time())
    await limiter.wait(ticket)
    return [ticket]


async def test_the_learned_pace_keeps_to_its_floors_and_ceiling(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = _limiter(min_concurrent=4, min_rpm=300, max_concurrent=12)
    out = await _admit(limiter, 14)
    assert len(out) == 12  # the ceiling, before anything is learned
    _refuse(limiter, out[1:])  # the server took one: the window keeps to its floor
    assert limiter.window == 4
    assert limiter.rates()["requests"] == pytest.approx(6.0)  # half the 12 sent
    _succeed(limiter, out[:1])
    await trio.sleep(1.5)
    lone = await _admit_one(limiter)
    _refuse(limiter, lone)  # one sent in the last second: half of it is below the floor
    assert limiter.rates()["requests"] == pytest.approx(5.0)
    for _ in range(200):
        await trio.sleep(1.5)
        _succeed(limiter, await _admit(limiter, 12))
    assert limiter.window == 12  # the ceiling


async def test_a_lone_refusal_learns_no_window_and_a_stated_rate_holds(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = _limiter()
    lone = await _admit_one(limiter)
    _refuse(limiter, lone)  # one call out says nothing of how many the server takes
    assert limiter.window == math.inf
    stated = _limiter()
    out = await _admit(stated, 10)
    stated.learn(out[0], {"x-ratelimit-limit-requests": "600"})
    _refuse(stated, out[5:])
    assert stated.window == 5  # the window is learned; the rate is the header's
    assert stated.rates() == {"requests": pytest.approx(10.0)}
    _succeed(stated, out[:5])
    assert stated.rates() == {"requests": pytest.approx(10.0)}
    configured = _limiter(rpm=120)
    _refuse(configured, await _admit(configured, 1))
    assert configured.rates() == {"requests": pytest.approx(2.0)}  # configured: it holds


def test_the_floors_of_the_learned_pace_are_settings() -> None:
    [(name, limit)] = check_rate_limits({"openai": {"min_concurrent": 2, "min_rpm": 30}}).items()
    assert (name, limit.min_concurrent, limit.min_rpm) == ("openai", 2, 30)
