"""A client that stops reading: cancels still act at once, and nothing is lost or reordered."""

from __future__ import annotations

import fcntl
import os
import struct
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from bridge.engines.one_process import READ_CHUNK
from bridge.fronts.backpressure import HIGH_WATER
from bridge.scripted_model import FLOOD_PIECE_CHARS, FLOOD_PIECES, flood_piece, flood_reply_text
from tests.support.acp import RawAcp
from tests.support.env import WAIT, fake_pi_command, requires_pi
from tests.support.leaks import no_run_processes, run_processes
from tests.support.raw import RawBridge

PAGE = 4096
#: Polls in a row that must see the agent blocked with nothing more written.
STALLED_POLLS = 5


def pipe_fill(path: str) -> tuple[int, int]:
    """(bytes buffered, capacity) of the pipe at `path` (a /proc/<pid>/fd/<n> link), opened as an
    extra reader that never reads."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        buffered = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
        return buffered, fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
    finally:
        os.close(fd)


def blocked_writing_a_pipe(pid: int) -> bool:
    """Whether the process sleeps in the kernel waiting for room in a pipe."""
    with open(f"/proc/{pid}/wchan") as handle:
        return "pipe_write" in handle.read()


def bytes_written(pid: int) -> int:
    """What the process has written so far (its `wchar` in /proc/<pid>/io)."""
    with open(f"/proc/{pid}/io") as handle:
        for line in handle:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    raise AssertionError(f"no wchar in /proc/{pid}/io")


def wait_until_stalled(bridge: RawBridge, timeout: float = WAIT) -> int:
    """Wait for the state "our reader has stopped, the bridge's stdout pipe to us is full, and the
    agent is blocked writing its stdout, making no progress": the bridge has stopped reading the
    agent. Returns the agent's pid.

    A full pipe is not at its capacity in bytes: the kernel appends a write to the last page only
    if it fits there, so each of the pipe's pages may be left part empty. Hence more than half full,
    and the agent seen blocked, with nothing more written, over several polls in a row."""
    assert bridge.proc.stdout is not None
    ours = f"/proc/self/fd/{bridge.proc.stdout.fileno()}"
    deadline = time.monotonic() + timeout
    seen: dict[int, tuple[int, int]] = {}  # pid -> (its bytes written, polls in a row blocked at that)
    while time.monotonic() < deadline:
        buffered, capacity = pipe_fill(ours)
        for proc in run_processes(marker=bridge.marker):
            try:
                if not (
                    bridge.reader_parked.is_set()
                    and buffered > capacity // 2
                    and blocked_writing_a_pipe(proc.pid)
                ):
                    seen.pop(proc.pid, None)
                    continue
                written = bytes_written(proc.pid)
            except OSError:
                continue
            before, polls = seen.get(proc.pid, (-1, 0))
            seen[proc.pid] = (written, polls + 1 if written == before else 1)
            if seen[proc.pid][1] >= STALLED_POLLS:
                return proc.pid
        time.sleep(0.02)  # polling kernel states: no event tells that another process is blocked
    raise AssertionError(
        f"the agent was never blocked on its pipe within {timeout} s: the bridge buffers without bound"
        f" ({stall_state(bridge, ours)})"
    )


def stall_state(bridge: RawBridge, ours: str) -> str:
    """What each part of the stall looks like now: for a failure's message."""
    buffered, capacity = pipe_fill(ours)
    agents = []
    for proc in run_processes(marker=bridge.marker):
        try:
            with open(f"/proc/{proc.pid}/wchan") as handle:
                agents.append(f"pid {proc.pid} {proc.status()} in {handle.read() or '-'}")
        except (OSError, psutil.Error) as exc:
            agents.append(f"pid {proc.pid}: {exc}")
    try:
        with open(f"/proc/{bridge.pid}/wchan") as handle:
            bridge_in = handle.read()
    except OSError as exc:
        bridge_in = str(exc)
    return (
        f"our reader parked: {bridge.reader_parked.is_set()}; our pipe: {buffered} of {capacity} bytes;"
        f" the bridge in {bridge_in or '-'}, {len(bridge.messages)} messages read;"
        f" the agent's processes: {agents or 'none'}"
    )


@pytest.fixture
def bridge() -> Iterator[RawBridge]:
    raw = RawBridge()
    raw.initialize({"piCommand": fake_pi_command(), "warmPool": False})
    yield raw
    raw.close()


def test_cancel_acts_while_the_client_is_not_reading(bridge: RawBridge, tmp_path: Path) -> None:
    progress = tmp_path / "progress"
    bridge.pause_reading()
    # A workspace of its own: the checkout's is no place for an agent's run (the CI builds in it).
    flood = {"runId": "flood", "prompt": str(progress), "model": "flood", "cwd": str(tmp_path)}
    run = bridge.request("pi/run", flood)
    agent = wait_until_stalled(bridge)
    written = int(progress.read_text() or 0) if progress.exists() else 0
    assert written < 64 * 1024 * 1024, "backpressure must bound what the bridge buffers"
    cancel = bridge.request("pi/cancel", {"runId": "flood"})
    # Still not reading a single byte: the cancel must act anyway.
    no_run_processes(
        bridge, timeout=10, where=f"after a cancel while the client was not reading (agent {agent})"
    )
    bridge.resume_reading()
    assert bridge.response(run)["error"]["code"] == -32800
    assert bridge.response(cancel)["result"]["found"] is True
    messages = bridge.run_messages("flood")
    assert [m["seq"] for m in messages] == list(range(1, len(messages) + 1)), "every message, in order"
    last = messages[-1]
    assert last["type"] == "terminal.cancelled"
    deltas = "".join(m["content"]["text"] for m in messages if m["type"] == "assistant")
    assert last["content"]["text"] == deltas != ""
    assert len(deltas) < 64 * 1024 * 1024, "the agent was stopped mid-flood, not drained into memory"


def test_time_blocked_on_a_slow_client_is_not_agent_silence(tmp_path: Path) -> None:
    """A client slower than the agent must not get the run killed as `stalled` by silenceTimeoutMs:
    the agent is silent only because the bridge stopped reading it."""
    silence_s = 0.5
    raw = RawBridge()
    try:
        raw.initialize(
            {
                "piCommand": fake_pi_command(),
                "warmPool": False,
                "silenceTimeoutMs": int(silence_s * 1000),
                "env": {"FAKE_PI_FLOOD_BYTES": str(24 * 1024 * 1024)},
            }
        )
        progress = tmp_path / "progress"
        raw.pause_reading()
        slow = {"runId": "slow-reader", "prompt": str(progress), "model": "flood", "cwd": str(tmp_path)}
        run = raw.request("pi/run", slow)
        agent = wait_until_stalled(raw)
        # The agent stays held on its pipe for three silence limits: time that must not count.
        # Held = it writes no more than the bridge may still take in: on a loaded machine the agent
        # can block on its pipe while the bridge is still reading, below the high-water mark. From
        # then on it takes at most the rest of HIGH_WATER of output (each agent line a little
        # longer than the text it carries), one read chunk, and what the agent's pipe holds.
        _, agent_pipe = pipe_fill(f"/proc/{agent}/fd/1")
        bound = int(HIGH_WATER * 1.05) + READ_CHUNK + agent_pipe
        assert bound < 24 * 1024 * 1024 // 2, "the bound must tell a held agent from a drained one"
        before = bytes_written(agent)
        held_until = time.monotonic() + 3 * silence_s
        while time.monotonic() < held_until:
            written = bytes_written(agent) - before
            assert written <= bound, f"the agent wrote {written} bytes while the client did not read"
            time.sleep(0.05)  # polling a kernel state: no event tells that another process is blocked
        raw.resume_reading()
        result = raw.response(run)["result"]
        assert result["status"] == "completed", result.get("error")
        assert result["attempts"] == 1
    finally:
        raw.close()


def wait_until_output_held(bridge: RawBridge, timeout: float = WAIT, polls: int = 5) -> int:
    """Wait for the state "our reader has stopped, an agent's stdout pipe is full, and our pipe
    has not moved for `polls` polls in a row": the bridge has stopped reading the agent. (Node does
    not block on a full pipe: it queues in its own memory, so the agent's state is not the sign.
    Neither pipe is a byte count away from full: a write that does not fit in a pipe's last page
    starts the next one, so each page may be left part empty.)
    Returns the agent's pid."""
    stdout = bridge.proc.stdout
    assert stdout is not None
    deadline = time.monotonic() + timeout
    seen: dict[int, tuple[int, int, int]] = {}
    streak: dict[int, int] = {}
    while time.monotonic() < deadline:
        ours, _ = pipe_fill(f"/proc/self/fd/{stdout.fileno()}")
        for proc in run_processes(marker=bridge.marker):
            try:
                buffered, capacity = pipe_fill(f"/proc/{proc.pid}/fd/1")
            except OSError:
                continue
            held = bridge.reader_parked.is_set() and ours > 0 and buffered > capacity // 2
            still = held and seen.get(proc.pid, (-1, -1, -1))[2] == ours
            streak[proc.pid] = streak.get(proc.pid, 0) + 1 if still else 0
            seen[proc.pid] = (buffered, capacity, ours)
            if streak[proc.pid] >= polls:
                return proc.pid
        time.sleep(0.02)  # polling kernel states: no event tells that another process's pipe is full
    raise AssertionError(
        f"no agent's output was held within {timeout} s: the bridge buffers without bound "
        f"(last seen, per pid: its stdout buffered/capacity, our pipe's bytes; parked "
        f"{bridge.reader_parked.is_set()}: {seen})"
    )


@requires_pi
def test_time_blocked_on_a_slow_client_is_not_the_live_pi_s_silence(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    """The same rule for a conversation's live pi (the rpc engine): while the bridge waits for the
    client it does not read pi, so pi's output waits in its pipe; silenceTimeoutMs must not count that."""
    silence_s = 1.5
    raw = RawBridge()
    try:
        raw.initialize(
            {"env": {"PI_CODING_AGENT_DIR": str(pi_agent_dir)}, "silenceTimeoutMs": int(silence_s * 1000)}
        )
        raw.pause_reading()
        run = raw.request(
            "pi/run",
            {
                "runId": "slow-reader-rpc",
                "prompt": "go",
                "provider": "fake",
                "model": "flood",
                "cwd": str(tmp_path),
            },
        )
        pi = wait_until_output_held(raw)
        # Held for two silence limits. The bridge still reads up to its high-water mark of
        # frames, which is more of pi's bytes (each event line carries an envelope around its
        # delta); the flood's 21 MB would all be written if nothing held pi back.
        before = bytes_written(pi)
        held_until = time.monotonic() + 2 * silence_s
        while time.monotonic() < held_until:
            try:
                written = bytes_written(pi) - before
            except FileNotFoundError:
                raise AssertionError("pi was stopped while the client did not read") from None
            assert written <= 2 * HIGH_WATER, f"pi wrote {written} bytes while the client did not read"
            time.sleep(0.05)  # polling a kernel state: no event tells that another process is held
        raw.resume_reading()
        result = raw.response(run)["result"]
        assert result["status"] == "completed", result.get("error")
        assert result["attempts"] == 1
        assert result["text"] == "".join(flood_piece(i) for i in range(FLOOD_PIECES)), "every delta, in order"
    finally:
        raw.close()


FLOOD_DELTAS = 8192  # the scripted model's flood-8192: 32 MB of numbered 4 KB deltas


def children_of(pid: int) -> list[int]:
    """The pids of a process's live children."""
    try:
        return [child.pid for child in psutil.Process(pid).children()]
    except psutil.Error:
        return []


def stdout_backlog(pid: int) -> int:
    """Bytes waiting in the process's stdout pipe (0 once it is gone)."""
    try:
        return pipe_fill(f"/proc/{pid}/fd/1")[0]
    except OSError:
        return 0


def bytes_written_or_none(pid: int) -> int | None:
    """`bytes_written`, None once the process is gone."""
    try:
        return bytes_written(pid)
    except OSError:
        return None


def wait_until_pi_held(bridge: RawAcp, timeout: float = WAIT) -> int:
    """Wait until the bridge has stopped reading pi: our reader parked, pi's stdout pipe holding
    what the bridge does not read, and pi writing nothing more for a while (Node waits for room
    on its stdout in epoll, not in write(2), so it is seen stopped, not blocked). Returns its pid."""
    deadline = time.monotonic() + timeout
    quiet: dict[int, tuple[int, float]] = {}
    while time.monotonic() < deadline:
        for pid in children_of(bridge.pid):
            try:
                written = bytes_written(pid)
            except OSError:
                continue
            if not bridge.reader_parked.is_set() or stdout_backlog(pid) < 8 * PAGE:
                quiet.pop(pid, None)
                continue
            since = quiet.get(pid)
            if since is None or since[0] != written:
                quiet[pid] = (written, time.monotonic())
            elif time.monotonic() - since[1] >= 0.5:
                return pid
        time.sleep(0.02)  # polling kernel states: no event tells that another process is held
    raise AssertionError(
        f"pi was never held on its pipe within {timeout} s: the bridge buffers without bound"
    )


@requires_pi
def test_acp_a_client_that_stops_reading_holds_pi_and_a_cancel_still_acts(
    pi_agent_dir: Path, tmp_path: Path
) -> None:
    """The ACP front's backpressure: a client that stops reading leaves pi held on its pipe
    (the bridge keeps a bounded backlog), a session/cancel stops the prompt while the client
    still reads nothing (what pi prints up to its answer to abort is read), and once it reads
    again every chunk arrives, once, in order."""
    bridge = RawAcp(pi_agent_dir, tmp_path)
    try:
        bridge.request("initialize", {"protocolVersion": 1})
        session_id = bridge.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})["result"][
            "sessionId"
        ]
        model = {"sessionId": session_id, "configId": "model", "value": f"fake/flood-{FLOOD_DELTAS}"}
        assert "result" in bridge.request("session/set_config_option", model)
        bridge.pause_reading()
        prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": "flood, please"}]}
        bridge.send({"jsonrpc": "2.0", "id": 7, "method": "session/prompt", "params": prompt})
        agent = wait_until_pi_held(bridge)
        # Held, not just slow: while nobody reads, pi gets no further than the bridge's
        # hysteresis lets it (one pass of the backlog below the low-water mark at most).
        before = bytes_written(agent)
        held_until = time.monotonic() + 1.5
        while time.monotonic() < held_until:
            written = bytes_written(agent) - before
            assert written <= HIGH_WATER, f"pi wrote {written} more bytes while the client did not read"
            time.sleep(0.05)  # polling a kernel state: no event tells that another process is held
        assert bytes_written(agent) < FLOOD_DELTAS * FLOOD_PIECE_CHARS // 2, "the backlog is bounded"
        held = bytes_written(agent)
        bridge.send_line(b"not json")  # its error answer must not hold up the frame behind it
        bridge.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session_id}})
        # Still not reading a byte: the bridge must read on to pi's answer to its abort (what pi
        # prints up to it), so pi writes more than its pipe holds; left unread, pi stays held
        # until it is killed when the abort's grace ends.
        deadline = time.monotonic() + WAIT
        while (written := bytes_written_or_none(agent)) is None or written - held <= 16 * PAGE:
            assert written is not None, "pi was killed: the bridge never read on to its answer to abort"
            assert time.monotonic() < deadline, "the bridge never read on to pi's answer to its abort"
            time.sleep(0.02)  # polling a kernel state: no event tells that a pipe was read
        bridge.resume_reading()
        answer = bridge.wait(lambda f: f.get("id") == 7)
        assert answer["result"]["stopReason"] == "cancelled", answer
        assert [f["error"]["code"] for f in bridge.null_id_errors()] == [-32700]
        chunks = [
            f["params"]["update"]["content"]["text"]
            for f in bridge.frames
            if f.get("method") == "session/update"
            and f["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        ]
        text = "".join(chunks)
        assert 0 < len(text) < FLOOD_DELTAS * FLOOD_PIECE_CHARS, "stopped mid-flood"
        assert text == flood_reply_text(len(text) // FLOOD_PIECE_CHARS), "every chunk, once, in order"
        # Whether pi settled within the abort's grace (the conversation keeps it) or was
        # stopped after it, the conversation goes on.
        again = {"sessionId": session_id, "configId": "model", "value": "fake/text"}
        assert "result" in bridge.request("session/set_config_option", again)
        follow_up = bridge.request("session/prompt", {**prompt, "prompt": [{"type": "text", "text": "hi"}]})
        assert follow_up["result"]["stopReason"] == "end_turn", follow_up
    finally:
        assert bridge.close() == 0
    assert bridge.not_frames == []
