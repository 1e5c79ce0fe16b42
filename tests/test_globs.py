"""Glob patterns: the same answers as a regex translation, without its exponential time."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.core._errors import ConfigError
from runtime.core._globs import MAX_ALTERNATIVES, compile_glob, escape_glob


def reference(pattern: str, *, paths: bool, stop_chars: str = "") -> re.Pattern[str]:
    """The regex translation the globs used before (issue 15): right, but it backtracks."""
    stops = ("/" if paths else "") + stop_chars
    star = f"[^{re.escape(stops)}]*" if stops else ".*"
    one = f"[^{re.escape(stops)}]" if stops else "."

    def translate(pattern: str) -> str:
        out: list[str] = []
        i, n = 0, len(pattern)
        while i < n:
            c = pattern[i]
            if c == "*":
                j = i
                while j < n and pattern[j] == "*":
                    j += 1
                whole = (i == 0 or pattern[i - 1] == "/") and (j == n or pattern[j] == "/")
                if paths and j - i >= 2 and whole:
                    out.append(".*" if j == n else "(?:.*/)?")
                    j += 0 if j == n else 1
                else:
                    out.append(star)
                i = j
            elif c == "?":
                out.append(one)
                i += 1
            elif c == "[":
                k = i + 1
                if k < n and pattern[k] == "!":
                    k += 1
                if k < n and pattern[k] == "]":
                    k += 1
                end = pattern.find("]", k)
                if end == -1:
                    out.append(re.escape("["))
                    i += 1
                    continue
                body = pattern[i + 1 : end]
                negate = body.startswith("!")
                body = body[1:] if negate else body
                members = body.replace("\\", "\\\\").replace("^", "\\^").replace("[", "\\[")
                out.append(f"[^{members}{re.escape(stops)}]" if negate else f"[{members}]")
                i = end + 1
            elif c == "{" and paths and (end := pattern.find("}", i)) != -1:
                out.append("(?:" + "|".join(map(translate, pattern[i + 1 : end].split(","))) + ")")
                i = end + 1
            else:
                out.append(re.escape(c))
                i += 1
        return "".join(out)

    return re.compile(translate(pattern), re.DOTALL)


_PATH_PIECES = ["a", "b", ".", "/", "*", "**", "?", "[ab]", "[!a]", "{a,b}", "{a/b,*}"]
_TEXT_PIECES = ["a", "b", " ", ";", "\n", "*", "?", "[ab]", "[!a]", "|"]


@settings(max_examples=800, deadline=None)
@given(
    st.lists(st.sampled_from(_PATH_PIECES), max_size=7).map("".join),
    st.text(alphabet="ab./", max_size=9),
)
def test_path_globs_answer_as_the_regex_translation(pattern: str, path: str) -> None:
    expected = reference(pattern, paths=True).fullmatch(path) is not None
    assert compile_glob(pattern).fullmatch(path) is expected


@settings(max_examples=800, deadline=None)
@given(
    st.lists(st.sampled_from(_TEXT_PIECES), max_size=7).map("".join),
    st.text(alphabet="ab ;\n|", max_size=9),
    st.sampled_from(["", ";|\n"]),
)
def test_text_globs_answer_as_the_regex_translation(pattern: str, text: str, stops: str) -> None:
    expected = reference(pattern, paths=False, stop_chars=stops).fullmatch(text) is not None
    assert compile_glob(pattern, paths=False, stop_chars=stops).fullmatch(text) is expected


@pytest.mark.parametrize(
    ("pattern", "paths", "text"),
    [
        ("*a" * 20 + "*b", True, "a" * 4000),
        ("*a" * 20 + "*b", False, "a" * 100_000),
        ("**/" * 20 + "b", True, "a/" * 2000 + "c"),
        ("*" + "?" * 50 + "*b", False, "a" * 100_000),
        ("{*a*a*a*b,*a*a*a*c}" * 2, True, "a" * 4000),
    ],
)
@pytest.mark.slow  # a speed: the bound is the point
def test_patterns_that_backtrack_as_regexes_match_in_bounded_time(
    pattern: str, paths: bool, text: str
) -> None:
    glob = compile_glob(pattern, paths=paths)
    start = time.perf_counter()
    assert not glob.fullmatch(text)
    assert time.perf_counter() - start < 0.5


def test_braces_expanding_past_the_limit_are_a_config_error() -> None:
    assert len(str(MAX_ALTERNATIVES)) > 0
    compile_glob("{a,b}" * 8)  # 256: at the limit
    with pytest.raises(ConfigError, match=f"more than {MAX_ALTERNATIVES} patterns"):
        compile_glob("{a,b}" * 9)


def test_a_bad_character_class_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="bad character class"):
        compile_glob("[z-a]")


@given(st.text(alphabet="ab*?[]{},/.!", max_size=12))
def test_an_escaped_text_matches_exactly_itself(text: str) -> None:
    assert compile_glob(escape_glob(text)).fullmatch(text)
    assert compile_glob(escape_glob(text, paths=False), paths=False).fullmatch(text)
