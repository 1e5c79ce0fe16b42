"""Limits: ``public()`` (made once per instance) and the run ids ``open_runtime`` makes."""

from __future__ import annotations

import itertools
import os
import re

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime import Limits
from runtime.wiring import _open
from runtime.wiring._open import new_run_id

_limits = st.builds(
    Limits,
    max_turns=st.integers(1, 10**6),
    max_depth=st.integers(1, 100),
    max_parallel=st.integers(1, 10**4),
    mailbox_size=st.integers(1, 100),
    finish_grace_s=st.floats(0.001, 1e6),
    context_window=st.none() | st.integers(1, 10**7),
    compact_threshold=st.floats(0.01, 1.0),
    max_usd=st.none() | st.floats(0.01, 1000.0),
)


@given(st.lists(_limits, min_size=1, max_size=8), st.data())
def test_public_is_asdict_of_the_instance_asked_every_time_and_a_fresh_dict(
    instances: list[Limits], data: st.DataObject
) -> None:
    # Asked in any order, any number of times: always the straightforward attrs.asdict of
    # that very instance (without max_usd when unset: run_started.config as before money
    # budgets), and a dict the caller may change without touching the next answer.
    def expected(limits: Limits) -> dict[str, object]:
        out = attrs.asdict(limits)
        if out["max_usd"] is None:
            del out["max_usd"]
        return out

    for _ in range(20):
        limits = data.draw(st.sampled_from(instances))
        got = limits.public()
        assert got == expected(limits)
        got["max_turns"] = -1
        assert limits.public() == expected(limits)


def test_run_ids_take_the_os_random_bytes_in_order_each_once_and_keep_their_form(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The pool hands out what the OS gave, 3 bytes a run id, in order, never twice, and
    # refills when it runs out (768 bytes: 256 ids).
    drawn = itertools.count()
    monkeypatch.setattr(_open._secrets, "token_bytes",
                        lambda n: bytes(next(drawn) % 256 for _ in range(n)))
    monkeypatch.setattr(_open, "_random", b"")
    ids = [new_run_id() for _ in range(600)]
    assert all(re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", i) for i in ids)
    assert ids == sorted(ids, key=lambda i: i[:15])  # by time (a stable sort)
    assert "".join(i[-6:] for i in ids) == bytes(k % 256 for k in range(1800)).hex()


def test_a_forked_child_does_not_reuse_its_parents_next_run_ids() -> None:
    new_run_id()  # the pool is filled
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids must not be the parent's next ones
        try:
            os.write(write, " ".join(new_run_id() for _ in range(5)).encode())
        finally:
            os._exit(0)
    os.close(write)
    child = os.read(read, 4096).decode().split()
    os.close(read)
    os.waitpid(pid, 0)
    parent = [new_run_id() for _ in range(5)]
    assert len(child) == 5
    assert not {c[-6:] for c in child} & {p[-6:] for p in parent}
