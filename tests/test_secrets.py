"""Secret filtering: which names look secret, the filtered env, secret values, redaction."""

from __future__ import annotations

import io
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _toolkit import call, make_ctx

from runtime import open_runtime
from runtime.core._secrets import (
    Redactor,
    filter_env,
    log_secrets,
    looks_secret,
    redact,
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


def test_a_stream_holds_back_what_could_be_the_start_of_a_secret() -> None:
    r = Redactor(["sk-abcdef123"])
    assert r.split_stream("key: sk-ab") == ("key: ", "sk-ab")
    assert r.split_stream("sk-abcdef123 and s") == ("*** and ", "s")
    assert r.split_stream("nothing here") == ("nothing here", "")
    # Overlapping secrets: the one found whole is never cut by the hold-back.
    r2 = Redactor(["XYZW", "ZWQ1"])
    assert r2.split_stream("..XYZW") == ("..", "XYZW")
    assert r2.split_stream("XYZW" + "Q1 end") == ("***Q1 end", "")


def test_the_halves_of_a_secret_cut_by_the_output_cap_are_masked() -> None:
    r = Redactor(["SECRETVALUE-0123456789"])
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
        for word in (b"sesame", b"4242"):
            assert word not in data
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
