"""The pi session-file reader on crafted files: damaged, foreign, branched and huge sessions."""

from __future__ import annotations

import io
import json
import os
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from bridge.agents.pi import PiAgent
from bridge.agents.pi import sessions as pi_sessions
from bridge.agents.pi.session_paths import cwd_folder
from bridge.agents.pi.sessions import NO_RESULT, list_sessions, read_session
from bridge.agents.values import RunOptions, SessionCheckpoint
from bridge.contract import SessionHistory

CWD = "/home/me/project"


class SessionWriter:
    """Writes entries the way pi 1.6.0 does (key order type, id, parentId, timestamp)."""

    def __init__(
        self, agent_dir: Path, session_id: str, cwd: str = CWD, stamp: str = "2026-01-01T10-00-00-000Z"
    ):
        folder = agent_dir / "sessions" / cwd_folder(cwd)
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{stamp}_{session_id}.jsonl"
        self.last: str | None = None
        self.count = 0
        header = {"type": "session", "version": 3, "id": session_id, "timestamp": "2026-01-01T10:00:00.000Z"}
        self._write({**header, "cwd": cwd})

    def _write(self, entry: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as stream:
            stream.write(json.dumps(entry, separators=(",", ":")) + "\n")

    def raw(self, text: str) -> None:
        with self.path.open("a", encoding="utf-8") as stream:
            stream.write(text)

    def entry(self, kind: str, parent: str | bool | None = True, **fields: Any) -> str:
        self.count += 1
        entry_id = f"e{self.count:07x}"
        parent_id = self.last if parent is True else parent
        self._write(
            {
                "type": kind,
                "id": entry_id,
                "parentId": parent_id,
                "timestamp": "2026-01-01T10:00:01.000Z",
                **fields,
            }
        )
        self.last = entry_id
        return entry_id

    def message(self, message: dict[str, Any], parent: str | bool | None = True) -> str:
        return self.entry("message", parent, message=message)

    def user(self, text: str, parent: str | bool | None = True) -> str:
        return self.message(
            {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}, parent
        )

    def assistant(
        self, text: str, *, thinking: str = "", calls: Sequence[tuple[str, str, dict[str, Any]]] = ()
    ) -> str:
        content: list[dict[str, Any]] = []
        if thinking:
            content.append({"type": "thinking", "thinking": thinking})
        if text:
            content.append({"type": "text", "text": text})
        content += [
            {"type": "toolCall", "id": cid, "name": name, "arguments": args} for cid, name, args in calls
        ]
        return self.message({"role": "assistant", "content": content, "stopReason": "stop", "timestamp": 2})

    def tool_result(self, call_id: str, name: str, output: str, *, error: bool = False) -> str:
        return self.message(
            {"role": "toolResult", "toolCallId": call_id, "toolName": name,
             "content": [{"type": "text", "text": output}], "isError": error, "timestamp": 3}
        )  # fmt: skip

    def one_turn(self, prompt: str = "Say hello", answer: str = "Hello!") -> None:
        self.message(
            {"role": "system", "content": "", "sections": {"preamble": "You are pi."}, "timestamp": 0}
        )
        self.user(prompt)
        self.assistant(answer)


@pytest.fixture
def agent_dir(tmp_path: Path) -> Path:
    return tmp_path / "agent"


def env_of(agent_dir: Path) -> dict[str, str]:
    return {"PI_CODING_AGENT_DIR": str(agent_dir)}


def history_of(agent_dir: Path, session_id: str) -> dict[str, Any]:
    result = read_session(session_id, env_of(agent_dir))
    assert isinstance(result, SessionHistory), result
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


def test_history_has_the_live_message_types_in_stream_order(agent_dir: Path) -> None:
    writer = SessionWriter(agent_dir, "s1")
    writer.one_turn("Run it")
    writer.assistant(
        "Let me run that.", thinking="I should run it.", calls=[("c1", "bash", {"command": "echo hi"})]
    )
    writer.tool_result("c1", "bash", "hi\n")
    writer.assistant("It printed hi.")
    writer.user("Break it")
    writer.assistant("", calls=[("c2", "bash", {"command": "exit 3"})])
    writer.tool_result("c2", "bash", "exit code 3", error=True)
    history = history_of(agent_dir, "s1")
    assert history["found"] is True and history["cwd"] == CWD and history["title"] == "Run it"
    first, second = history["turns"]
    assert first["prompt"] == "Run it"
    assert [(m["type"], m["content"]) for m in first["messages"]] == [
        ("assistant", {"text": "Hello!"}),
        ("assistant", {"text": "Let me run that."}),
        ("assistant.thought", {"text": "I should run it."}),
        ("tool.call", {"toolCallId": "c1", "name": "bash", "arguments": {"command": "echo hi"}}),
        ("tool.completed", {"toolCallId": "c1", "name": "bash", "output": "hi\n"}),
        ("assistant", {"text": "It printed hi."}),
    ]
    assert [m["type"] for m in second["messages"]] == ["tool.call", "tool.failed"]
    assert second["messages"][1]["content"] == {"toolCallId": "c2", "name": "bash", "error": "exit code 3"}


def test_a_tool_call_without_result_is_closed_as_failed(agent_dir: Path) -> None:
    writer = SessionWriter(agent_dir, "open-call")
    writer.user("go")
    writer.assistant("Running.", calls=[("c9", "bash", {"command": "sleep 30"})])
    messages = history_of(agent_dir, "open-call")["turns"][0]["messages"]
    assert messages[-2:] == [
        {
            "type": "tool.call",
            "content": {"toolCallId": "c9", "name": "bash", "arguments": {"command": "sleep 30"}},
        },
        {"type": "tool.failed", "content": {"toolCallId": "c9", "name": "bash", "error": NO_RESULT}},
    ]


def test_a_half_written_last_line_is_read_up_to_the_last_good_line(agent_dir: Path) -> None:
    writer = SessionWriter(agent_dir, "cut")
    writer.one_turn("first")
    writer.raw('{"type":"message","id":"zz","parentId":"e0000003","timestamp":"2026-01-01T1')
    history = history_of(agent_dir, "cut")
    assert [turn["prompt"] for turn in history["turns"]] == ["first"]
    (summary,) = list_sessions(CWD, 50, env_of(agent_dir))
    assert summary.session_id == "cut" and summary.title == "first"


def test_garbage_lines_are_skipped(agent_dir: Path) -> None:
    writer = SessionWriter(agent_dir, "noisy")
    writer.one_turn("before")
    writer.raw('not json at all\n\x00\x01\xff\n[1, 2]\n\n{"type": \n')
    writer.user("after")
    writer.assistant("still here")
    history = history_of(agent_dir, "noisy")
    assert [turn["prompt"] for turn in history["turns"]] == ["before", "after"]
    assert history["turns"][1]["messages"] == [{"type": "assistant", "content": {"text": "still here"}}]


def test_a_foreign_file_in_the_folder_is_skipped_not_fatal(agent_dir: Path) -> None:
    writer = SessionWriter(agent_dir, "real")
    writer.one_turn()
    folder = writer.path.parent
    (folder / "notes.jsonl").write_text('{"hello": "world"}\n')
    (folder / "binary.jsonl").write_bytes(os.urandom(4096))
    (folder / "empty.jsonl").write_bytes(b"")
    (folder / "README.md").write_text("not a session")
    (folder / "dir.jsonl").mkdir()
    sessions = list_sessions(CWD, 50, env_of(agent_dir))
    assert [s.session_id for s in sessions] == ["real"]
    assert read_session("notes", env_of(agent_dir)).found is False


def test_listing_is_newest_first_bounded_by_limit_and_counts_messages(agent_dir: Path) -> None:
    for index in range(5):
        writer = SessionWriter(agent_dir, f"s{index}", stamp=f"2026-01-01T10-00-0{index}-000Z")
        writer.one_turn(f"prompt {index}")
        os.utime(writer.path, (1_800_000_000 + index, 1_800_000_000 + index))
    sessions = list_sessions(CWD, 3, env_of(agent_dir))
    assert [s.session_id for s in sessions] == ["s4", "s3", "s2"]
    assert sessions[0].message_count == 3  # system, user, assistant: every message entry, as pi counts
    assert sessions[0].updated_at == "2027-01-15T08:00:04.000Z"
    assert sessions[0].created_at == "2026-01-01T10:00:00.000Z"
    assert sessions[0].live is False


def test_title_is_the_session_name_else_the_first_prompt_cut_to_80(agent_dir: Path) -> None:
    long_prompt = "word " * 40
    SessionWriter(agent_dir, "unnamed").one_turn(long_prompt)
    named = SessionWriter(agent_dir, "named")
    named.one_turn(long_prompt)
    named.entry("session_info", name="Old name")
    named.entry("session_info", name="Refactor auth")
    titles = {s.session_id: s.title for s in list_sessions(CWD, 50, env_of(agent_dir))}
    assert titles["named"] == "Refactor auth"
    assert len(titles["unnamed"]) == 80 and titles["unnamed"].startswith("word word")
    assert history_of(agent_dir, "named")["title"] == "Refactor auth"


def test_sessions_of_another_cwd_sharing_the_folder_name_are_not_listed(agent_dir: Path) -> None:
    SessionWriter(agent_dir, "mine", cwd="/a/b").one_turn()
    SessionWriter(agent_dir, "theirs", cwd="/a-b").one_turn()
    assert [s.session_id for s in list_sessions("/a/b", 50, env_of(agent_dir))] == ["mine"]


def test_a_flat_session_dir_is_filtered_by_cwd(tmp_path: Path, agent_dir: Path) -> None:
    SessionWriter(agent_dir, "here", cwd="/x").one_turn()
    SessionWriter(agent_dir, "there", cwd="/y").one_turn()
    flat = tmp_path / "flat"
    flat.mkdir()
    for path in (agent_dir / "sessions").glob("*/*.jsonl"):
        path.rename(flat / path.name)
    env = {"PI_CODING_AGENT_SESSION_DIR": str(flat)}
    assert [s.session_id for s in list_sessions("/x", 50, env)] == ["here"]
    assert read_session("there", env).found is True


def test_a_branched_session_shows_the_branch_of_the_last_entry(agent_dir: Path) -> None:
    writer = SessionWriter(agent_dir, "tree")
    writer.user("root prompt", parent=None)
    root_answer = writer.assistant("root answer")
    writer.user("abandoned prompt")
    writer.assistant("abandoned answer")
    writer.user("new branch prompt", parent=root_answer)
    writer.assistant("new branch answer")
    turns = history_of(agent_dir, "tree")["turns"]
    assert [turn["prompt"] for turn in turns] == ["root prompt", "new branch prompt"]


def test_unknown_or_unsafe_ids_are_not_found(agent_dir: Path) -> None:
    SessionWriter(agent_dir, "known").one_turn()
    env = env_of(agent_dir)
    for session_id in ("unknown", "kno", "*", "../known", "known/..", ".known"):
        result = read_session(session_id, env)
        assert result.found is False and result.session_id == session_id
    assert list_sessions("/nowhere", 50, env) == []


def test_over_long_lines_are_skipped_whole() -> None:
    stream = io.BytesIO(b"short\n" + b"x" * 100 + b"\nafter\nlast-without-newline")
    assert list(pi_sessions._lines(stream, max_bytes=50)) == [b"short", b"after", b"last-without-newline"]


def test_texts_and_arguments_are_clipped(agent_dir: Path) -> None:
    writer = SessionWriter(agent_dir, "big-texts")
    writer.user("p" * 200_000)
    writer.assistant("", calls=[("w", "write", {"path": "f", "content": "c" * 100_000})])
    writer.tool_result("w", "write", "o" * 200_000)
    turn = history_of(agent_dir, "big-texts")["turns"][0]
    assert len(turn["prompt"]) <= pi_sessions.MAX_TEXT_CHARS + len(pi_sessions.CLIPPED)
    call, completed = turn["messages"]
    assert len(call["content"]["arguments"]["content"]) <= pi_sessions.MAX_ARGUMENT_CHARS + 40
    assert len(completed["content"]["output"]) <= pi_sessions.MAX_TEXT_CHARS + 40


def test_history_keeps_the_last_turns_and_counts_the_omitted(agent_dir: Path) -> None:
    writer = SessionWriter(agent_dir, "many")
    turns = pi_sessions.MAX_TURNS + 7
    for index in range(turns):
        writer.user(f"turn {index}")
        writer.assistant(f"answer {index}")
    history = history_of(agent_dir, "many")
    assert history["omittedTurns"] == 7
    assert history["turns"][0]["prompt"] == "turn 7" and history["turns"][-1]["prompt"] == f"turn {turns - 1}"


def write_huge_session(agent_dir: Path, session_id: str, megabytes: int) -> SessionWriter:
    """A session of `megabytes` MB: turns with 20 kB tool outputs, plus one 8 MB output line."""
    writer = SessionWriter(agent_dir, session_id)
    writer.one_turn("huge session")
    output = "line of tool output\n" * 1000
    turn = 0
    while writer.path.stat().st_size < megabytes * 1024 * 1024:
        turn += 1
        writer.user(f"turn {turn}")
        writer.assistant("Running.", calls=[(f"c{turn}", "bash", {"command": "cat big"})])
        writer.tool_result(f"c{turn}", "bash", output if turn != 10 else "y" * 8 * 1024 * 1024)
        writer.assistant(f"Done {turn}.")
    return writer


def test_a_50_mb_session_is_read_in_bounded_time_and_memory(agent_dir: Path) -> None:
    writer = write_huge_session(agent_dir, "huge", 50)
    size = writer.path.stat().st_size
    tracemalloc.start()
    started = time.perf_counter()
    (summary,) = list_sessions(CWD, 50, env_of(agent_dir))
    listed = time.perf_counter()
    history = history_of(agent_dir, "huge")
    read = time.perf_counter()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"\n{size / 2**20:.0f} MB session: list {listed - started:.3f} s, read {read - listed:.3f} s, "
          f"peak {peak / 2**20:.1f} MB, {len(history['turns'])} turns kept, {history.get('omittedTurns', 0)} omitted")  # fmt: skip
    assert summary.message_count == writer.count
    assert history["turns"][-1]["messages"][-1]["content"]["text"].startswith("Done")
    assert history["omittedTurns"] > 0
    # Sanity bounds, not benchmarks: the figures are reported by the print above.
    assert read - started < 20
    assert peak < 64 * 2**20


def test_a_session_cut_at_any_byte_is_read_up_to_its_last_good_line(agent_dir: Path) -> None:
    writer = SessionWriter(agent_dir, "cut-anywhere")
    writer.one_turn("first")
    writer.assistant("Running.", thinking="hmm", calls=[("c1", "bash", {"command": "echo hi"})])
    writer.tool_result("c1", "bash", "hi\n")
    whole = writer.path.read_bytes()
    header_end = whole.index(b"\n")
    for cut in range(len(whole) + 1):
        writer.path.write_bytes(whole[:cut])
        result = read_session("cut-anywhere", env_of(agent_dir))
        listed = list_sessions(CWD, 50, env_of(agent_dir))
        header_complete = cut >= header_end
        assert result.found is header_complete and len(listed) == int(header_complete), cut
        if header_complete:
            SessionHistory.model_validate(result.model_dump(by_alias=True))


def test_random_bytes_after_a_header_never_fail(agent_dir: Path) -> None:
    writer = SessionWriter(agent_dir, "random")
    for seed in range(20):
        writer.raw(os.urandom(2000 + seed).decode("latin-1"))
        writer.raw('\n{"type":"message","id":"x","parentId":null,"message":{"role":"user","content":5}}\n')
        assert read_session("random", env_of(agent_dir)).found is True
        assert len(list_sessions(CWD, 50, env_of(agent_dir))) == 1


# ------------------------------------------------------------------------------------ retry


def test_a_retry_cuts_a_resumed_session_back_to_its_size_before_the_run(agent_dir: Path) -> None:
    writer = SessionWriter(agent_dir, "01a2-resumed")
    writer.one_turn("earlier", "answer")
    before = writer.path.read_bytes()
    options = RunOptions(prompt="p", cwd=CWD, session_id="01a2-resumed", resumed=True)
    checkpoint = PiAgent().checkpoint_session(options, env_of(agent_dir))
    assert checkpoint == SessionCheckpoint("01a2-resumed", str(writer.path), len(before))
    writer.user("the failed prompt")
    assert PiAgent().rewind_session(checkpoint, "01a2-resumed", options, env_of(agent_dir)) == options
    assert writer.path.read_bytes() == before, "the earlier turns, byte for byte"
    assert PiAgent().rewind_session(checkpoint, "01a2-resumed", options, env_of(agent_dir)) == options
    assert writer.path.read_bytes() == before, "a file already cut back is left alone"


def test_a_session_the_run_started_keeps_its_header_and_is_resumed_by_the_retry(agent_dir: Path) -> None:
    options = RunOptions(prompt="p", cwd=CWD, continue_session=True)
    checkpoint = PiAgent().checkpoint_session(options, env_of(agent_dir))
    assert checkpoint == SessionCheckpoint(None)
    writer = SessionWriter(agent_dir, "01a2-started")
    header = writer.path.read_bytes()
    writer.user("the failed prompt")
    retry = PiAgent().rewind_session(checkpoint, "01a2-started", options, env_of(agent_dir))
    assert writer.path.read_bytes() == header
    assert (retry.session_id, retry.continue_session, retry.resumed) == ("01a2-started", False, False)


def test_a_retry_checkpoints_only_the_file_pi_will_open(agent_dir: Path, tmp_path: Path) -> None:
    env = env_of(agent_dir)
    SessionWriter(agent_dir, "01a2-aaaa")
    SessionWriter(agent_dir, "01a2-aaab", stamp="2026-01-02T10-00-00-000Z")
    shared_prefix = PiAgent().checkpoint_session(RunOptions(prompt="p", cwd=CWD, session_id="01a2-aa"), env)
    assert shared_prefix is None, "which of two matches pi opens is pi's to say"
    unique = PiAgent().checkpoint_session(RunOptions(prompt="p", cwd=CWD, session_id="01a2-aaab"), env)
    assert unique is not None and unique.session_id == "01a2-aaab"
    newest = PiAgent().checkpoint_session(RunOptions(prompt="p", cwd=CWD, continue_session=True), env)
    assert newest is not None and newest.session_id == "01a2-aaab"
    (tmp_path / "not-a-session.jsonl").write_text("garbage\n")
    foreign = RunOptions(prompt="p", cwd=str(tmp_path), session_id="not-a-session.jsonl")
    assert PiAgent().checkpoint_session(foreign, env) is None
    missing = PiAgent().checkpoint_session(RunOptions(prompt="p", cwd=CWD, session_id="01a2-none"), env)
    assert missing == SessionCheckpoint("01a2-none")
    options = RunOptions(prompt="p", cwd=CWD)
    assert PiAgent().rewind_session(SessionCheckpoint(None), None, options, env) == options
