"""Secret filtering: which names look secret, the filtered env, secret values, redaction."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _toolkit import call, make_ctx

from runtime.core._secrets import filter_env, looks_secret, redact, secret_values
from tools._bash import BashTool


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
        "A_TOKEN": "short",
        "B_TOKEN": "abcdefgh",
        "C_SECRET": "abcdefghijkl",
        "D_KEY": "abcdefgh",
        "PATH": "/usr/local/bin:/usr/bin",
    }
    assert secret_values(env) == ["abcdefghijkl", "abcdefgh"]


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
