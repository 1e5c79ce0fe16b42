"""Secret filtering: which names look secret, the filtered env, secret values, redaction."""

from __future__ import annotations

import io
import os
import re
import textwrap
from pathlib import Path
from typing import Any

import attrs
import pytest
from _toolkit import call, make_ctx
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import EventBus, open_runtime
from runtime.core._events import (
    COMMON_FIELDS,
    EVENT_TYPES,
    Event,
    TextDelta,
    ThinkingDelta,
    searched_fields,
)
from runtime.core._secrets import (
    MASK,
    MIN_SECRET_LEN,
    Secrets,
    filter_env,
    log_secrets,
    looks_secret,
    redact,
    run_environ,
    scan_env,
    secret_values,
)
from tools._bash import BashTool, _Capture


@pytest.mark.parametrize(
    "name",
    [
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GITHUB_TOKEN",
        "GH_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_ACCESS_KEY_ID",
        "DB_PASSWORD",
        "PGPASSWORD",
        "MYSQL_PWD",
        "SMTP_PASS",
        "LDAP_PASSWD",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "AZURE_CREDENTIAL",
        "HTTP_AUTH",
        "BASIC_AUTH_HEADER",
        "OAUTH_CLIENT",
        "AUTHORIZATION",
        "NPM_AUTHTOKEN",
        "npm_config_authToken",
        "stripeApiKey",
        "APIKEY",
        "SSH_KEYS",
        "CLIENT_SECRETS",
        "GITLAB_PAT",
        "SSH_AUTH_SOCK",
        "my.secret.value",
    ],
)
def test_secret_looking_names(name: str) -> None:
    assert looks_secret(name)


@pytest.mark.parametrize(
    "name",
    [
        "PATH",
        "HOME",
        "PWD",
        "OLDPWD",
        "USER",
        "LANG",
        "TERM",
        "SHELL",
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "KEYBOARD_LAYOUT",
        "PYTHONPATH",
        "VIRTUAL_ENV",
        "OPENAI_BASE_URL",
    ],
)
def test_ordinary_names(name: str) -> None:
    assert not looks_secret(name)


def test_errs_on_the_side_of_dropping() -> None:
    # Over-matching costs one `allow` entry; under-matching leaks a key. These are accepted.
    assert looks_secret("TOKENIZERS_PARALLELISM")
    assert looks_secret("TURNKEY_MODE")


def test_filter_env_drops_secrets_and_keeps_the_rest() -> None:
    env = {"PATH": "/bin", "OPENAI_API_KEY": "sk-123456789", "HOME": "/root", "GH_TOKEN": "ghp_x"}
    assert filter_env(env) == {"PATH": "/bin", "HOME": "/root"}
    assert "OPENAI_API_KEY" in env  # the input is not changed


def test_filter_env_allows_by_exact_name_and_by_pattern() -> None:
    env = {
        "GH_TOKEN": "a",
        "AWS_SECRET_ACCESS_KEY": "b",
        "AWS_SESSION_TOKEN": "c",
        "OPENAI_API_KEY": "d",
        "PATH": "/bin",
    }
    assert filter_env(env, allow=["GH_TOKEN", "AWS_*"]) == {
        "GH_TOKEN": "a",
        "AWS_SECRET_ACCESS_KEY": "b",
        "AWS_SESSION_TOKEN": "c",
        "PATH": "/bin",
    }


def test_filter_env_allow_patterns_are_case_sensitive() -> None:
    assert filter_env({"GH_TOKEN": "a"}, allow=["gh_*"]) == {}


def test_secret_values_are_long_enough_unique_and_longest_first() -> None:
    env = {
        "B_TOKEN": "abcdefgh",
        "C_SECRET": "abcdefghijkl",
        "D_KEY": "abcdefgh",
        "GITHUB_AUTH": "short",  # secret-looking, but not clearly: short values stay
        "PATH": "/usr/local/bin:/usr/bin",
    }
    assert secret_values(env) == ["abcdefghijkl", "abcdefgh"]


def test_short_values_of_clearly_secret_names_are_redacted_too() -> None:
    env = {
        "A_TOKEN": "short",
        "DB_PASSWORD": "hunter",
        "MY_KEY": "k3y",
        "X_SECRET": "s3cr3t",
        "USE_API_KEY": "true",  # a switch, not a secret
        "RETRIES_TOKEN": "3",  # too short to mask anywhere
        "PIN_PASSWORD": "42",
        "PORT_KEY": "80",
    }
    assert secret_values(env) == ["hunter", "s3cr3t", "short", "k3y"]


@pytest.mark.parametrize(
    ("text", "secrets", "expected"),
    [
        ("key=sk-abcdefgh here", ["sk-abcdefgh"], "key=*** here"),
        ("sk-abcdefgh sk-abcdefgh", ["sk-abcdefgh"], "*** ***"),
        ("nothing to hide", ["sk-abcdefgh"], "nothing to hide"),
        ("long=abcdefghijkl", ["abcdefgh", "abcdefghijkl"], "long=***"),
        ("a.b*c+d", ["a.b*c+d"], "***"),
        ("text", [], "text"),
        ("text", [""], "text"),
    ],
)
def test_redact(text: str, secrets: list[str], expected: str) -> None:
    assert redact(text, secrets) == expected


async def test_bash_does_not_see_filtered_secrets(workspace: Path) -> None:
    env = {"PATH": os.environ["PATH"], "OPENAI_API_KEY": "sk-live-123456789", "COLOR": "blue"}
    ctx = make_ctx(workspace, env=filter_env(env))
    out = await call(BashTool(), {"command": 'echo "${OPENAI_API_KEY-gone} $COLOR"'}, ctx)
    assert out.splitlines()[0] == "gone blue"


# -- one place masks everything that leaves a run (#15) ------------------------------------

SECRET = "open sesame 4242 xyz"  # spaces: the scripted provider streams it over four deltas


def _masked_by_hand(text: str, secrets: list[str]) -> str:
    """The masking the matcher must give, the slow obvious way: every character of every
    occurrence of every secret (overlapping ones too) hidden, each run of overlapping
    occurrences one MASK."""
    hidden = [False] * len(text)
    runs: list[tuple[int, int]] = []
    for start in range(len(text)):
        ends = [start + len(s) for s in secrets if text.startswith(s, start)]
        if not ends:
            continue
        end = max(ends)
        if runs and start < runs[-1][1]:
            runs[-1] = (runs[-1][0], max(end, runs[-1][1]))
        else:
            runs.append((start, end))
        for i in range(start, end):
            hidden[i] = True
    out, pos = [], 0
    for start, end in runs:
        out += [text[pos:start], MASK]
        pos = end
    return "".join(out) + text[pos:]


def _streamed(r: Secrets, pieces: list[str]) -> str:
    """*pieces* through ``split_stream`` as the bus sends them: the held tail goes with the next
    piece, and out on its own (masked) once the stream ends."""
    out, held = [], ""
    for piece in pieces:
        sent, held = r.split_stream(held + piece)
        out.append(sent)
    out.append(r.text(held))
    return "".join(out)


def test_a_stream_holds_back_what_could_be_the_start_of_a_secret() -> None:
    r = Secrets(["sk-abcdef123"])
    assert r.split_stream("key: sk-ab") == ("key: ", "sk-ab")
    assert r.split_stream("sk-abcdef123 and s") == ("*** and ", "s")
    assert r.split_stream("nothing here") == ("nothing here", "")
    # Overlapping secrets: the run of them found whole is never cut by the hold-back.
    r2 = Secrets(["XYZW", "ZWQ1"])
    assert r2.split_stream("..XYZW") == ("..", "XYZW")
    assert r2.split_stream("XYZW" + "Q1 end") == ("*** end", "")


# Secrets that overlap themselves (a prefix that is also a suffix) or each other (one's end is
# another's start), or are prefixes of each other, with texts where they chain.
_OVERLAPPING = [
    (["abab-key-ab"], "xx abab-key-abab-key-ab yy abab-key-a"),
    (["aaaa1"], "aaaaa1 aaaa aaaaaaa1 aaa"),
    (["abcab"], "abcabcab abcab abca"),
    (["XYZW", "ZWQ1"], "..XYZWQ1 end XYZW ZWQ1 XYZ"),
    (["abc", "bcdefg"], "abcdefg abcdef bcdefg"),
    (["abcdefgh", "abcdefghijkl"], "abcdefghijk abcdefghijkl abcdefgh"),
    (["aab", "babaa"], "bbabaaaba"),
]


@pytest.mark.parametrize(("secrets", "text"), _OVERLAPPING)
def test_overlapping_secrets_are_masked_whole(secrets: list[str], text: str) -> None:
    # Each character of every occurrence hidden: masking them one after another from the left
    # showed the part of a secret that overlaps an earlier one ("***ab-key-ab").
    assert Secrets(secrets).text(text) == _masked_by_hand(text, secrets)


def test_a_secret_inside_a_longer_run_of_its_characters_or_a_longer_secret() -> None:
    assert Secrets(["aaaa1"]).text("aaaaa1") == "a***"
    assert Secrets(["abcdefgh", "abcdefghijkl"]).text("<abcdefghijkl>") == "<***>"
    assert Secrets(["abcdefgh", "abcdefghijkl"]).text("<abcdefghijk>") == "<***ijk>"
    assert Secrets(["abc", "bcdefg"]).text("abcdefg") == "***"
    assert Secrets(["abab-key-ab"]).text("abab-key-abab-key-ab") == "***"


@pytest.mark.parametrize(("secrets", "text"), _OVERLAPPING)
def test_overlapping_secrets_streamed_cut_anywhere_are_masked_as_the_whole_text(
    secrets: list[str], text: str
) -> None:
    r = Secrets(secrets)
    whole = _masked_by_hand(text, secrets)
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1):
            pieces = [text[:i], text[i:j], text[j:]]
            assert _streamed(r, pieces) == whole, (i, j)
    assert _streamed(r, list(text)) == whole, "a character a delta"


_PIECES = st.text(alphabet="ab-]^\\xz ", max_size=6)


@settings(max_examples=300, deadline=None)
@given(
    secret=st.permutations("ab-]^\\x").map(lambda chars: "".join(chars[:5])),
    pieces=st.lists(_PIECES, max_size=12),
)
def test_a_text_streamed_in_any_pieces_is_masked_as_the_whole_text(
    secret: str, pieces: list[str]
) -> None:
    # Characters a regex class would read (``]^\-``), and a secret cut anywhere, over any number
    # of pieces.
    r = Secrets([secret, secret[0] + "zzzz"])  # two sharing a first character
    assert _streamed(r, pieces) == r.text("".join(pieces))


_SMALL = st.text(alphabet="ab1", min_size=MIN_SECRET_LEN, max_size=6)


@settings(max_examples=500, deadline=None)
@given(
    secrets=st.lists(_SMALL, min_size=1, max_size=3),
    pieces=st.lists(st.text(alphabet="ab1", max_size=7), max_size=10),
)
def test_self_and_mutually_overlapping_secrets_streamed_in_any_pieces(
    secrets: list[str], pieces: list[str]
) -> None:
    # Two letters: secrets that overlap themselves ("abab", "aaa1") and each other, prefixes
    # of each other, chained in the text.
    r = Secrets(secrets)
    whole = "".join(pieces)
    assert r.text(whole) == _masked_by_hand(whole, list(r.values))
    assert _streamed(r, pieces) == r.text(whole)


@pytest.mark.parametrize(("secrets", "text"), _OVERLAPPING)
def test_the_bus_masks_streamed_text_and_thinking_as_the_whole_text(
    secrets: list[str], text: str
) -> None:
    """Through a real bus: each cut of the text into deltas, a text and a thinking stream
    interleaved (each releases the other's held tail), then the turn's end releases the rest."""
    from runtime.core._events import TurnFinished

    whole = _masked_by_hand(text, secrets)
    for i in range(len(text) + 1):
        bus = EventBus("r", secrets=Secrets(secrets))
        seen: list[Event] = []
        bus.add_tap(seen.append)
        for kind in (TextDelta, ThinkingDelta):
            for piece in (text[:i], text[i:]):
                bus.emit_nowait(kind(agent_id="a", parent_tool_use_id=None, text=piece))
        bus.emit_nowait(
            TurnFinished(
                agent_id="a",
                parent_tool_use_id=None,
                turn=1,
                stop_reason="end_turn",
                input_tokens=0,
                output_tokens=0,
            )
        )
        for kind in (TextDelta, ThinkingDelta):
            got = "".join(e.text for e in seen if isinstance(e, kind))
            assert got == whole, (kind.type, i)


def test_the_halves_of_a_secret_cut_by_the_output_cap_are_masked() -> None:
    r = Secrets(["SECRETVALUE-0123456789"])
    for offset in range(0, 40, 3):
        capture = _Capture(100, r)
        text = "a" * (50 - offset) + "SECRETVALUE-0123456789" + "b" * 500 + "SECRETVALUE-0123456789"
        capture.feed(text.encode())
        capture.flush()
        out = capture.text()
        assert "characters cut" in out
        for piece in ("SECRET", "VALUE", "0123456789", "CRETVAL", "456789"):
            assert piece not in out, (offset, out)


async def test_no_event_of_a_run_shows_a_secret_anywhere(tmp_path: Path, workspace: Path) -> None:
    scenario = {
        "agents": {
            "main": {
                "tools": ["bash", "agent"],
                "turns": [
                    {
                        "text": f"The password is {SECRET}, again {SECRET}.",
                        "thinking": f"think {SECRET}",
                        "tool_calls": [
                            {"name": "bash", "input": {"command": f"echo '{SECRET}'; exit 3"}},
                            {
                                "name": "agent",
                                "input": {"description": "x", "prompt": SECRET, "agent": "sub"},
                            },
                        ],
                    },
                    {"text": f"Done: {SECRET}"},
                ],
            },
            "sub": {"tools": [], "turns": [{"text": f"sub got {SECRET}"}]},
        }
    }
    trace = tmp_path / "t.jsonl"
    out = io.BytesIO()
    events: list[Any] = []
    env = {"DB_PASSWORD": SECRET, "PATH": os.environ["PATH"]}
    async with open_runtime(
        scenario=scenario,
        workspace=workspace,
        trace=trace,
        json_out=out,
        env=env,
        permission_mode="allow-all",
        on_event=events.append,
    ) as rt:
        outcome = await rt.run(f"the prompt has {SECRET} in it")
    assert outcome.status == "completed"
    for data in (trace.read_bytes(), out.getvalue()):
        assert b"sesame" not in data
        # Not inside a number: a timestamp or a duration may hold the digits 4242.
        assert re.search(rb"(?<![0-9.])4242(?![0-9.])", data) is None
    main_id = events[1].agent_id
    text = "".join(e.text for e in events if e.type == "text_delta" and e.agent_id == main_id)
    assert text == "The password is ***, again ***.Done: ***"
    thinking = "".join(e.text for e in events if e.type == "thinking_delta")
    assert thinking == "think ***"
    started = [e for e in events if e.type == "agent_started"]
    assert [e.prompt for e in started] == ["the prompt has *** in it", "***"]
    bash = next(e for e in events if e.type == "tool_started" and e.name == "bash")
    assert bash.input == {"command": "echo '***'; exit 3"}
    assert bash.summary == "bash: echo '***'; exit 3"
    finished = [e for e in events if e.type == "agent_finished"]
    assert {e.result for e in finished} == {"sub got ***", "Done: ***"}


def test_log_lines_are_masked_like_events(capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    import structlog

    from runtime.cli._options import error_line, setup_logging

    key = "k3y-in-a-path-0123456789"
    setup_logging(debug=False, verbose=True)  # warnings shown (quiet is the default)
    try:
        with log_secrets([key]):
            structlog.get_logger("trio_agents.tools").error(
                "read failed", path=f"/ws/{key}/notes.txt", error=OSError(2, f"no {key}")
            )
            logging.getLogger("somelib").warning("token %s used", key)
            error_line(f"cannot open /ws/{key}")
    finally:
        structlog.reset_defaults()
        logging.getLogger().handlers.clear()
    err = capsys.readouterr().err
    assert "read failed" in err
    assert "token *** used" in err
    assert "cannot open /ws/***" in err
    assert key not in err


_PROBE = textwrap.dedent(
    """
    # Runs as `python -c`, started with secrets in its environment: seals itself as the
    # trio-agents command does, then lets bash try to read them from this process.
    import os, subprocess, sys
    from runtime.core._secrets import run_environ, seal_process_environ
    seal_process_environ()
    assert run_environ()["MY_API_KEY"] == sys.argv[1]  # the providers still have it
    assert "MY_API_KEY" not in os.environ
    out = subprocess.run(
        ["bash", "-c", "cat /proc/$PPID/environ | base64 -w0; echo; cat /proc/$PPID/environ | rev"],
        capture_output=True, check=True,
    )
    sys.stdout.buffer.write(out.stdout)
    """
)


def test_bash_cannot_read_the_secrets_from_the_runtimes_environment() -> None:
    import base64
    import subprocess
    import sys

    key = "sk-live-0123456789abcdef"
    env = {**os.environ, "MY_API_KEY": key, "DB_PASSWORD": "pw-42xy"}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, key],
        env=env,
        capture_output=True,
        check=True,
    ).stdout
    encoded, reversed_ = out.split(b"\n")[:2]
    environ = base64.b64decode(encoded)
    assert b"PATH=" in environ  # it did read the block: the rest is still there
    assert key.encode() not in environ
    assert b"pw-42xy" not in environ
    assert key[::-1].encode() not in reversed_


# -- the scan, once per distinct environment (issue 20) ----------------------------------------

_names = st.sampled_from(
    ["PATH", "HOME", "GITHUB_TOKEN", "DB_PASSWORD", "API_KEY", "GIT_AUTHOR_NAME", "MY_PAT", "X"]
)
_values = st.sampled_from(["", "1", "true", "abc", "hunter2hunter2", "sk-0123456789abcdef"])
_envs = st.dictionaries(_names, _values, max_size=6)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(_envs, st.lists(st.sampled_from(["API_KEY", "DB_*", "*TOKEN"]), max_size=2)),
        min_size=1,
        max_size=12,
    )
)
def test_scan_env_matches_filter_env_and_secret_values_across_calls(
    calls: list[tuple[dict[str, str], list[str]]],
) -> None:
    # Repeats and near repeats (a cached environment, then a changed one) in any order.
    for env, allow in [*calls, *reversed(calls)]:
        filtered, secrets = scan_env(env, allow)
        assert filtered == filter_env(env, allow)
        assert secrets == tuple(secret_values(env))
        filtered["MUTATED"] = "by the caller"  # a copy: the next run's is untouched
        assert "MUTATED" not in scan_env(env, allow)[0]


def test_run_environ_follows_changes_to_the_process_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = run_environ()
    assert first == dict(os.environ)
    monkeypatch.setenv("TRIO_AGENTS_TEST_TOKEN", "s3cr3t-value-1234")
    second = run_environ()
    assert second == dict(os.environ)
    assert second["TRIO_AGENTS_TEST_TOKEN"] == "s3cr3t-value-1234"
    assert "s3cr3t-value-1234" in scan_env(second)[1]
    monkeypatch.delenv("TRIO_AGENTS_TEST_TOKEN")
    assert run_environ() == dict(os.environ)
    second["TRIO_AGENTS_TEST_OTHER"] = "changed"  # each call gives a copy
    assert "TRIO_AGENTS_TEST_OTHER" not in run_environ()


def test_runs_with_the_same_secrets_share_one_secrets_object() -> None:
    assert Secrets.of(("abcdefgh",)) is Secrets.of(("abcdefgh",))
    assert Secrets.of(("abcdefgh",)).text("x abcdefgh y") == "x *** y"


# JSON-like event field values, their strings sometimes holding (or nearly holding) a secret.
_SECRET = "tok-5ecret-0123456789"
_texts = st.sampled_from(["", "plain", _SECRET, f"a {_SECRET} b", _SECRET[:-1], "tok-", "***"])


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    # A function, not a lambda over several lines: hypothesis reads the source to check that
    # the extension uses its argument, and cannot find it in such a lambda.
    return (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(_texts, inner, max_size=3)
    )


_field_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _texts,
    _containers,
    max_leaves=8,
)


def _walked(redactor: Secrets, obj: Any) -> Any:
    """The straightforward masking: every string at any depth, containers rebuilt."""
    if type(obj) is str:
        return redactor(obj)
    if isinstance(obj, dict):
        return {_walked(redactor, k): _walked(redactor, v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        items = [_walked(redactor, v) for v in obj]
        return items if isinstance(obj, list) else tuple(items)
    return obj


def _masked_classes() -> list[type[Event]]:
    """Every event class but the streamed deltas (their hold-back is tested on its own)."""
    return sorted(
        (c for c in EVENT_TYPES.values() if c not in (TextDelta, ThinkingDelta)),
        key=lambda c: c.type,
    )


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(_masked_classes()), st.data())
def test_the_bus_masks_an_events_fields_as_the_straightforward_walk_and_copies_nothing_clean(
    cls: type[Event], data: st.DataObject
) -> None:
    """The bus masks an event in place, a search per string field and no copy of a clean
    value (bench/README.md); it must give what masking every field the straightforward way
    gives, the fields it does not search (ids, enums, numbers) left alone."""
    own = [a.name for a in attrs.fields(cls) if a.name not in COMMON_FIELDS]
    values = {name: data.draw(_field_values, label=name) for name in own}
    secrets = Secrets([_SECRET])
    event = cls(agent_id="a", parent_tool_use_id=None, **values)
    EventBus("r", secrets=secrets).emit_nowait(event)
    searched = set(searched_fields(cls))
    for name, value in values.items():
        out = getattr(event, name)
        if name not in searched:
            assert out is value, name
            continue
        expected = _walked(secrets, value)
        assert out == expected, name
        assert type(out) is type(expected), name
        if expected == value:  # the fast path: nothing in it was a secret
            assert out is value, name
        assert _SECRET not in repr(out)
        assert secrets.value(value) == expected


def test_masking_walks_as_deep_as_it_says_and_masks_deeper_containers_whole() -> None:
    redactor = Secrets([_SECRET])
    for depth in (63, 64, 65, 66):
        nested: Any = ["plain"]
        for _ in range(depth):
            nested = [nested]
        # Nothing to mask: the same object back, however deep (and equal to the walk).
        assert redactor.value(nested) == _walked_bounded(redactor, nested, 0)
        secret_inside: Any = [_SECRET]
        for _ in range(depth):
            secret_inside = [secret_inside]
        assert _SECRET not in repr(redactor.value(secret_inside))
        assert redactor.value(secret_inside) == _walked_bounded(redactor, secret_inside, 0)


def _walked_bounded(redactor: Secrets, obj: Any, depth: int) -> Any:
    if type(obj) is str:
        return redactor(obj)
    if obj is None or isinstance(obj, int | float):
        return obj
    if depth > 64:
        return MASK
    if isinstance(obj, list):
        return [_walked_bounded(redactor, v, depth + 1) for v in obj]
    return obj


# -- one Secrets object, one policy -------------------------------------------------------------


def test_every_maker_of_secrets_follows_one_policy_and_one_mask() -> None:
    """What a provider key, an MCP value or an environment gives is filtered by one rule
    (at least MIN_SECRET_LEN characters, no flag word, no small number) and masked as MASK."""
    assert MASK == "***"
    given = ["k3y", "ab", "", "true", "OFF", "42", "1234", "sk-0123456789"]
    secrets = Secrets(given)
    assert secrets.values == ("sk-0123456789", "1234", "k3y")
    assert all(len(v) >= MIN_SECRET_LEN for v in secrets.values)
    # The same rule as the environment's clearly secret names.
    env = {f"V{i}_TOKEN": v for i, v in enumerate(given)}
    assert tuple(secret_values(env)) == secrets.values
    assert secrets.text("k3y ab true 42 1234") == "*** ab true 42 ***"
    assert redact("k3y ab", given) == "*** ab"
    assert repr(secrets) == "<Secrets: 3 values>", "a repr never shows a value"


def test_secrets_combine_into_one_object_shared_by_equal_sets() -> None:
    run = Secrets.of(("sk-0123456789",))
    assert run | () is run
    more = run | ["hdr-value-0123"]
    assert more.values == ("hdr-value-0123", "sk-0123456789")
    assert more is run | Secrets(["hdr-value-0123"]), "one object per set of values"
    assert "sk-0123456789" in more
    assert not Secrets()
    assert Secrets.of(()).text("anything") == "anything"


def test_a_runs_secrets_are_masked_in_log_lines_only_while_the_run_is_open() -> None:
    from runtime.core._secrets import redact_text

    secrets = Secrets(["sk-log-0123456789"])
    with secrets.in_logs():
        assert redact_text("key sk-log-0123456789") == "key ***"
        with Secrets(["sk-log-0123456789"]).in_logs():  # two runs, one key
            pass
        assert redact_text("key sk-log-0123456789") == "key ***"
    assert redact_text("key sk-log-0123456789") == "key sk-log-0123456789"
