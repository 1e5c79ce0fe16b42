"""Keeping secrets out of subprocesses, events and logs.

Secrets are recognised by the NAME of the environment variable that holds them: a name made of
words such as ``KEY``, ``TOKEN``, ``SECRET``, ``PASSWORD``, ``PASSWD``, ``CREDENTIAL`` or ``AUTH``
(``OPENAI_API_KEY``, ``GITHUB_TOKEN``, ``AWS_SECRET_ACCESS_KEY``, ``npm_config_authToken``).

* :func:`filter_env` drops such variables from the environment given to ``bash``, unless the user
  allows them by name or pattern.
* :func:`secret_values` collects their values, and :func:`redact` masks those values in any text
  (events, traces, error messages).

Matching works on words, not substrings, so ``GIT_AUTHOR_NAME`` (the word ``AUTHOR``) and
``KEYBOARD_LAYOUT`` stay, while compound words that end in a secret word (``APIKEY``,
``AUTHTOKEN``, ``DBPASSWORD``) are caught. It errs on the side of dropping: a variable dropped by
mistake is one ``allow`` entry away, a leaked key is not recoverable. Secrets that hide in values
of innocent-looking names (``DATABASE_URL=postgres://user:pw@host``) are not detected.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["filter_env", "looks_secret", "redact", "secret_values"]

# Words that make a name secret when a word of the name IS one, or ENDS with one (APIKEY).
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
# Words long and distinctive enough to count anywhere inside a word (SECRETSMANAGER, AUTHTOKENS).
_SECRET_INFIXES = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
# Short words that are secrets only as a whole word (MYSQL_PWD, DB_PASS), never as a part.
_SECRET_EXACT = ("PASS", "PWD", "PAT")
# Names that would match the rules above but are well known not to hold secrets.
_NOT_SECRET = frozenset({"PWD", "OLDPWD"})
# Values shorter than this are not worth redacting: masking "true" or "1" everywhere would wreck
# the text and protect nothing.
_MIN_SECRET_LEN = 8

_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NON_ALNUM = re.compile(r"[^A-Za-z0-9]+")


def looks_secret(name: str) -> bool:
    """Whether an environment variable called *name* probably holds a secret."""
    if name in _NOT_SECRET:
        return False
    words = _NON_ALNUM.split(_CAMEL_BOUNDARY.sub("_", name).upper())
    return any(_secret_word(word) for word in words if word)


def _secret_word(word: str) -> bool:
    if word in _SECRET_EXACT:
        return True
    # Plural forms: KEYS, TOKENS, CREDENTIALS.
    stem = word[:-1] if word.endswith("S") else word
    if any(stem.endswith(secret) for secret in _SECRET_WORDS):
        return True
    if any(infix in word for infix in _SECRET_INFIXES):
        return True
    # AUTHZ, AUTHN, AUTHORIZATION, OAUTH... but not AUTHOR, the git identity everyone needs.
    return "AUTH" in word and ("AUTHOR" not in word or "AUTHORIZ" in word)


def filter_env(env: Mapping[str, str], allow: Iterable[str] = ()) -> dict[str, str]:
    """A copy of *env* without the variables whose names look like secrets.

    Args:
        env: the environment to filter, usually ``os.environ``.
        allow: names or ``fnmatch`` patterns (case-sensitive, like POSIX variable names) of
            secret-looking variables to keep anyway, e.g. ``["GH_TOKEN", "AWS_*"]``.

    Returns:
        A new dict; *env* is not changed.
    """
    patterns = tuple(allow)
    return {
        name: value
        for name, value in env.items()
        if not looks_secret(name) or _allowed(name, patterns)
    }


def _allowed(name: str, patterns: Sequence[str]) -> bool:
    return any(name == p or fnmatch.fnmatchcase(name, p) for p in patterns)


def secret_values(env: Mapping[str, str]) -> list[str]:
    """The values of the secret-looking variables of *env* worth redacting.

    Values shorter than 8 characters are left out (see :func:`redact`). The list has no
    duplicates and is ordered longest first.
    """
    values = {value for name, value in env.items() if looks_secret(name)}
    return sorted((v for v in values if len(v) >= _MIN_SECRET_LEN), key=lambda v: (-len(v), v))


def redact(text: str, secrets: Sequence[str], *, mask: str = "***") -> str:
    """*text* with every occurrence of each value in *secrets* replaced by *mask*.

    Longer secrets are replaced first, so a secret that contains another is masked whole.
    Empty strings in *secrets* are ignored. The pattern is compiled once per set of secrets
    (a run has one), so this is cheap enough for every tool result.
    """
    pattern = _secrets_pattern(tuple(secrets))
    return text if pattern is None else pattern.sub(mask, text)


@functools.lru_cache(maxsize=32)
def _secrets_pattern(secrets: tuple[str, ...]) -> re.Pattern[str] | None:
    wanted = sorted({s for s in secrets if s}, key=len, reverse=True)
    if not wanted:
        return None
    # One alternation, one pass: replacing secrets one by one could create a new match across
    # the boundary of an earlier replacement.
    return re.compile("|".join(re.escape(s) for s in wanted))
