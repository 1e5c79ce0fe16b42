"""Limits: ``public()`` (made once per instance) and the run ids ``open_runtime`` makes."""

from __future__ import annotations

import os
import re

import attrs
from hypothesis import given
from hypothesis import strategies as st

from runtime import Limits
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
)


@given(st.lists(_limits, min_size=1, max_size=8), st.data())
def test_public_is_asdict_of_the_instance_asked_every_time_and_a_fresh_dict(
    instances: list[Limits], data: st.DataObject
) -> None:
    # Asked in any order, any number of times: always the straightforward attrs.asdict of
    # that very instance, and a dict the caller may change without touching the next answer.
    for _ in range(20):
        limits = data.draw(st.sampled_from(instances))
        got = limits.public()
        assert got == attrs.asdict(limits)
        got["max_turns"] = -1
        assert limits.public() == attrs.asdict(limits)


def test_run_ids_sort_by_time_never_repeat_and_differ_in_a_forked_child() -> None:
    ids = [new_run_id() for _ in range(2000)]  # several refills of the random pool
    assert all(re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", i) for i in ids)
    assert ids == sorted(ids, key=lambda i: i[:15])
    assert len(set(ids)) == len(ids)
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
