"""Session files: round trip, atomic writes, refusal of broken or newer files, listing."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from runtime.cli._sessions import (
    FORMAT_VERSION,
    ChatSession,
    SessionError,
    SessionStore,
    decode_session,
    encode_session,
    new_session,
)
from runtime.core._messages import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock


def conversation() -> list[Message]:
    return [
        Message(role="user", content=(TextBlock(text="review the repo"),)),
        Message(
            role="assistant",
            content=(
                ThinkingBlock(text="split it", signature="sig"),
                TextBlock(text="Splitting."),
                ToolUseBlock(id="tu-1", name="agent", input={"prompt": "x", "n": [1, 2]}),
            ),
        ),
        Message(
            role="user",
            content=(ToolResultBlock(tool_use_id="tu-1", content="cancelled", is_error=True),),
        ),
        Message(role="assistant", content=(TextBlock(text="Done, ünïcödé ✓"),)),
    ]


def full_session() -> ChatSession:
    s = new_session(workspace="/w", provider="scripted", model="m", messages=conversation())
    s.turns = 1
    s.first_prompt = "review the repo"
    s.agent_types = ["general", "main"]
    s.trace_path = "/t/a.jsonl"
    s.traces = ["/t/a.jsonl"]
    s.usage.input_tokens, s.usage.output_tokens = 10, 20
    s.state.last_status = "completed"
    s.state.input_history = ["review the repo", "/tree"]
    s.state.run_ids = ["r1"]
    return s


def test_a_session_round_trips_through_its_file(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "sessions")
    session = full_session()
    path = store.save(session)
    assert path == tmp_path / "sessions" / f"{session.id}.json"
    loaded = store.load(session.id)
    assert loaded == session
    assert loaded.messages[1].content[0] == ThinkingBlock(text="split it", signature="sig")
    on_disk = orjson.loads(path.read_bytes())
    assert on_disk["format_version"] == FORMAT_VERSION
    assert on_disk["messages"][1]["content"][2] == {
        "kind": "tool_use",
        "id": "tu-1",
        "name": "agent",
        "input": {"prompt": "x", "n": [1, 2]},
    }


def test_unknown_keys_from_a_same_version_writer_are_ignored() -> None:
    obj = orjson.loads(encode_session(full_session()))
    obj["added_later"] = {"x": 1}
    assert decode_session(orjson.dumps(obj), where="f").turns == 1


def test_a_write_goes_to_a_synced_temp_file_then_replaces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SessionStore(tmp_path)
    session = full_session()
    calls: list[tuple[str, object]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        calls.append(("fsync", fd))
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        calls.append(("replace", (Path(src).parent, Path(src).name.startswith("."), dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    store.save(session)
    kinds = [c[0] for c in calls]
    # The data is synced before the rename, and the folder after it.
    assert kinds == ["fsync", "replace", "fsync"]
    assert calls[1][1] == (tmp_path, True, tmp_path / f"{session.id}.json")


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SessionStore(tmp_path)
    session = full_session()
    path = store.save(session)
    before = path.read_bytes()

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    session.turns = 2
    with pytest.raises(SessionError, match="No space left on device"):
        store.save(session)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


@pytest.mark.parametrize(
    ("content", "fault"),
    [
        (b"{not json", "not a session file: not JSON"),
        (b"[1, 2]", "not a session file: expected a JSON object"),
        (b'{"id": "x"}', "not a session file: no valid format_version"),
        (b'{"format_version": 1, "id": "x"}', "required field missing @ $.created_ts"),
    ],
)
def test_a_broken_file_is_one_clear_error_and_is_never_overwritten(
    tmp_path: Path, content: bytes, fault: str
) -> None:
    store = SessionStore(tmp_path)
    path = tmp_path / "s1.json"
    path.write_bytes(content)
    with pytest.raises(SessionError) as info:
        store.load("s1")
    message = str(info.value)
    assert "\n" not in message
    assert fault in message
    assert str(path) in message
    session = new_session()
    session.id = "s1"
    with pytest.raises(SessionError, match="will not overwrite"):
        store.save(session)
    assert path.read_bytes() == content


def test_a_bad_field_is_named_by_its_json_path(tmp_path: Path) -> None:
    obj = orjson.loads(encode_session(full_session()))
    obj["messages"][1]["content"][1] = {"kind": "text"}
    with pytest.raises(SessionError, match=r"@ \$\.messages\[1\]\.content\[1\]\.text"):
        decode_session(orjson.dumps(obj), where="f")
    obj = orjson.loads(encode_session(full_session()))
    obj["turns"] = "three"
    with pytest.raises(SessionError, match=r"expected int @ \$\.turns"):
        decode_session(orjson.dumps(obj), where="f")


def test_a_newer_format_is_refused_and_kept(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    obj = orjson.loads(encode_session(full_session()))
    obj["format_version"] = FORMAT_VERSION + 1
    obj["new_field"] = True
    path = tmp_path / "future.json"
    content = orjson.dumps(obj)
    path.write_bytes(content)
    with pytest.raises(SessionError, match="written by a newer trio-agents"):
        store.load("future")
    session = full_session()
    session.id = "future"
    with pytest.raises(SessionError, match="will not overwrite"):
        store.save(session)
    assert path.read_bytes() == content


def test_the_file_name_is_the_id_so_a_copy_is_a_fork(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    session = full_session()
    path = store.save(session)
    (tmp_path / "fork.json").write_bytes(path.read_bytes())
    fork = store.load("fork")
    assert fork.id == "fork"
    assert fork.messages == session.messages


@pytest.mark.parametrize("bad", ["../escape", "a/b", "", ".hidden", "x" * 200])
def test_ids_cannot_name_files_outside_the_folder(tmp_path: Path, bad: str) -> None:
    with pytest.raises(SessionError, match="is not a session id"):
        SessionStore(tmp_path).path_for(bad)


def test_a_missing_session_names_the_folder(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "none")
    with pytest.raises(SessionError, match=r"no session 'nope' in .*none \(see trio-agents"):
        store.load("nope")
    with pytest.raises(SessionError, match="no session to resume"):
        store.resolve(None)
    assert store.list_sessions() == []


def test_listing_shows_the_latest_first_and_flags_unreadable_files(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    first, second = full_session(), full_session()
    first.id, second.id = "s-old", "s-new"
    second.turns, second.first_prompt = 3, "second chat"
    store.save(first)
    store.save(second)
    os.utime(tmp_path / "s-old.json", (1000, 1000))
    (tmp_path / "broken.json").write_bytes(b"\x00garbage")
    (tmp_path / ".s-new.abc.tmp").write_bytes(b"half a write")  # a temp file is not a session
    (tmp_path / "notes.txt").write_text("not a session")
    os.utime(tmp_path / "broken.json", (500, 500))
    rows = store.list_sessions()
    assert [r.id for r in rows] == ["s-new", "s-old", "broken"]
    assert (rows[0].turns, rows[0].first_prompt, rows[0].error) == (3, "second chat", None)
    assert rows[2].error is not None
    assert rows[2].error.startswith("not a session file: not JSON")
    assert store.latest_id() == "s-new"
    assert store.resolve(None) == "s-new"
    assert store.resolve("s-old") == "s-old"
