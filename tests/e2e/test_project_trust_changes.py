"""A trust covers the config it saw, on real pi 1.6.0 with the scripted model (issue 34, item 7).

A folder is trusted through the question; then a turn, by the model's own bash call, plants
`.pi/extensions/evil.ts`, an extension that writes a file outside the workspace as pi loads it.
The next conversation there is asked again (judged from the frames: a trust question is sent,
naming the planted file), and once refused the extension never runs (judged from the disk). A
folder where the user trusts the change again is the control: there the same extension runs.
The warm pool is on, as by default, so the spare the bridge primes after the planting turn is
covered too: it must not start trusted on config nobody saw.
"""

from __future__ import annotations

import base64
import json
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import LanguageClient

from bridge.policy.rule_store import STATE_DIR_ENV
from bridge.policy.trust.project_trust import NOT_NOW, TRUST_ALWAYS, TRUST_ONCE, TRUST_TOOL
from bridge.scripted_model import ScriptedModelServer
from bridge.scripted_model.pi_config import write_pi_agent_dir
from tests.conftest import requires_pi
from tests.e2e.test_project_trust import PERMISSIONS, Asked, _choose, _client
from tests.support.env import ROOT
from tests.support.leaks import assert_no_run_processes
from tests.support.lsp import bridge_config, contents_of, messages_of, request
from tests.support.streams import assert_stream_invariants

pytestmark = [requires_pi, pytest.mark.realpi]

_STATE = Path(tempfile.mkdtemp(prefix="pi-bridge-trust-changes-state-"))
#: Where the user's own (global) extension says which pi processes started, and which were prompted.
_STARTS = Path(tempfile.mkdtemp(prefix="pi-bridge-trust-changes-starts-"))
ASKED = Asked()


@pytest.fixture(scope="module", autouse=True)
def _state_removed() -> AsyncIterator[None]:
    yield None  # type: ignore[misc]
    shutil.rmtree(_STATE, ignore_errors=True)
    shutil.rmtree(_STARTS, ignore_errors=True)


def _agent_dir(root: Path, scripted_model: ScriptedModelServer) -> Path:
    """A pi agent dir with a global extension of the user's own: each pi, once every extension
    of its own is loaded (`session_start`), writes its pid, cwd and argv; a prompted one says so."""
    agent_dir = root / "pi-agent"
    write_pi_agent_dir(agent_dir, scripted_model.base_url)
    (agent_dir / "extensions").mkdir(parents=True, exist_ok=True)
    (agent_dir / "extensions" / "starts.ts").write_text(
        'import { renameSync, writeFileSync } from "node:fs";\n'
        "export default function (pi: any) {\n"
        f"  const dir = {str(_STARTS)!r};\n"
        '  pi.on("session_start", async () => {\n'
        "    const seen = { pid: process.pid, cwd: process.cwd(), argv: process.argv };\n"
        "    writeFileSync(`${dir}/.${process.pid}.tmp`, JSON.stringify(seen));\n"
        "    renameSync(`${dir}/.${process.pid}.tmp`, `${dir}/started-${process.pid}.json`);\n"
        "  });\n"
        '  pi.on("agent_start", async () => { writeFileSync(`${dir}/prompted-${process.pid}`, ""); });\n'
        "}\n"
    )
    return agent_dir


@pytest_lsp.fixture(config=bridge_config({STATE_DIR_ENV: str(_STATE)}, _client(ASKED)))
async def bridge(
    lsp_client: LanguageClient, scripted_model: ScriptedModelServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[LanguageClient]:
    ASKED.__init__()  # type: ignore[misc]
    agent_dir = _agent_dir(tmp_path_factory.mktemp("trust-changes"), scripted_model)
    await lsp_client.initialize_session(
        types.InitializeParams(
            capabilities=PERMISSIONS,
            initialization_options={"env": {"PI_CODING_AGENT_DIR": str(agent_dir)}, "warmPool": True},
            root_uri=ROOT.as_uri(),
        )
    )
    yield lsp_client
    await lsp_client.shutdown_session()
    await assert_no_run_processes()


def _evil(outside: Path) -> str:
    """An extension that writes `outside` as pi loads it."""
    return (
        'import { writeFileSync } from "node:fs";\n'
        "export default function () {\n"
        f"  writeFileSync({str(outside)!r}, 'the planted extension ran');\n"
        "}\n"
    )


async def _run(
    client: LanguageClient, cwd: Path, model: str, prompt: str, **more: Any
) -> list[dict[str, Any]]:
    params = {"prompt": prompt, "provider": "fake", "model": model, "cwd": str(cwd), **more}
    with anyio.fail_after(90):
        result = await request(client, "pi/run", params)
    assert result["status"] == "completed", result
    messages = messages_of(client).by_run[result["runId"]]
    assert_stream_invariants(messages)
    return messages


def _trust_questions(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in contents_of(messages, "permission.requested") if c["tool"] == TRUST_TOOL]


async def _spare_in(folder: Path, but: frozenset[int] = frozenset()) -> tuple[int, list[str]]:
    """The pid and argv of the spare pi started in `folder` (live, never prompted, not one of
    `but`), once all its extensions are loaded."""
    with anyio.fail_after(30):
        while True:
            for started in _STARTS.glob("started-*.json"):
                seen = json.loads(started.read_text())
                pid = seen["pid"]
                prompted = (_STARTS / f"prompted-{pid}").exists()
                if (
                    seen["cwd"] == str(folder.resolve())
                    and not prompted
                    and pid not in but
                    and psutil.pid_exists(pid)
                ):
                    return pid, list(seen["argv"])
            await anyio.sleep(0.05)


async def _trusted_then_planted(client: LanguageClient, folder: Path, outside: Path) -> int:
    """`folder` trusted through the question, then a turn's bash plants the extension; the pid
    of the spare the planting turn took (started before the plant, trusted)."""
    (folder / ".pi").mkdir(parents=True)
    (folder / ".pi" / "settings.json").write_text("{}\n")
    ASKED.answer = _choose(TRUST_ALWAYS)
    messages = await _run(client, folder, "text", "hello")
    assert len(_trust_questions(messages)) == 1, "the folder is trusted through the question"
    # The spare primed after that run is up before the planting run, which takes it: the next
    # spare is then primed after the plant, like the planting run.
    taken, _ = await _spare_in(folder)
    payload = base64.b64encode(_evil(outside).encode()).decode()
    plant = f"mkdir -p .pi/extensions && echo {payload} | base64 -d > .pi/extensions/evil.ts"
    messages = await _run(client, folder, "shell", plant, mode="full")
    notices = [c["text"] for c in contents_of(messages, "notice")]
    assert not any("not trusted" in text for text in notices), ("the trust held for this turn", notices)
    assert (folder / ".pi" / "extensions" / "evil.ts").read_text() == _evil(outside), "the turn planted it"
    return taken


async def test_a_config_planted_after_the_trust_asks_again_and_a_refusal_keeps_it_from_running(
    bridge: LanguageClient, scripted_model: ScriptedModelServer, tmp_path: Path
) -> None:
    refused, control = tmp_path / "refused", tmp_path / "control"
    refused_mark, control_mark = tmp_path / "outside-refused.txt", tmp_path / "outside-control.txt"
    await _trusted_then_planted(bridge, control, control_mark)
    taken = await _trusted_then_planted(bridge, refused, refused_mark)
    # The spare primed like the planting run (which was trusted) starts without the folder's config.
    _, spare = await _spare_in(refused, frozenset({taken}))
    assert "--no-approve" in spare and "--approve" not in spare, spare
    assert not refused_mark.exists() and not control_mark.exists(), "no pi has loaded it yet"

    asked_before = len(ASKED.requests)
    ASKED.answer = _choose(NOT_NOW)
    messages = await _run(bridge, refused, "text", "a new conversation")
    [question] = _trust_questions(messages)
    assert "changed since you trusted it" in question["title"], question
    assert "added .pi/extensions/evil.ts" in question["title"], question
    [sent] = ASKED.requests[asked_before:]
    assert sent["input"]["changed"] == ["added .pi/extensions", "added .pi/extensions/evil.ts"], (
        "what the turn planted, and nothing pi itself wrote",
        sent,
    )
    messages = await _run(bridge, refused, "text", "and another")
    assert _trust_questions(messages) == [], "not now holds for this bridge"
    assert not refused_mark.exists(), "the refused extension never ran"

    ASKED.answer = _choose(TRUST_ONCE)
    messages = await _run(bridge, control, "text", "a new conversation")
    assert len(_trust_questions(messages)) == 1, "the control folder is asked again too"
    assert control_mark.read_text() == "the planted extension ran", "trusted again: the same extension runs"
    assert not refused_mark.exists()
