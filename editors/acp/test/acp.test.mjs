// `pi-bridge acp` end to end through the official ACP TypeScript SDK's client app
// (@agentclientprotocol/sdk 2.x: `client()...connect()`, which replaced ClientSideConnection),
// against the real pi and the bridge's built-in scripted model (`--scripted-model`).
// Env: PI_BRIDGE_PYTHON (a python that can run `-m bridge`), PATH with Node 22 and pi first.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { mkdtempSync, writeFileSync, readFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk/unstable";

const PYTHON = process.env.PI_BRIDGE_PYTHON || "python3";
const WAIT_MS = 30000;

function within(promise, what, ms = WAIT_MS) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Answer a session/request_permission by choosing the offered option of `kind`. */
const choose = (kind) => (params) => ({ outcome: { outcome: "selected", optionId: params.options.find((o) => o.kind === kind).optionId } });

/** A bridge with its own scripted model and pi agent dir; `updates` records every session/update,
 * `asked` every session/request_permission, answered by `bridge.answer(params, signal)` (allow once
 * unless a test says otherwise). */
async function startBridge(cwd, agentDir) {
  const env = { ...process.env, PI_BRIDGE_STATE_DIR: mkdtempSync(join(tmpdir(), "acp-ts-state-")) };
  if (agentDir) env.PI_CODING_AGENT_DIR = agentDir;
  const args = agentDir ? ["-m", "bridge", "acp"] : ["-m", "bridge", "--scripted-model", "acp"];
  const child = spawn(PYTHON, args, { cwd, env, stdio: ["pipe", "pipe", "ignore"] });
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
  const updates = [];
  const asked = [];
  let changed = () => {};
  const bridge = { answer: choose("allow_once") };
  const app = acp
    .client({ name: "pi-bridge-ts-test" })
    .onNotification(acp.methods.client.session.update, (ctx) => {
      updates.push(ctx.params);
      changed();
    })
    .onRequest(acp.methods.client.session.requestPermission, (ctx) => {
      asked.push(ctx.params);
      changed();
      return bridge.answer(ctx.params, ctx.signal);
    })
    .onRequest("*", ({ method }) => {
      throw acp.RequestError.methodNotFound(method);
    });
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  const connection = app.connect(stream);
  const agent = connection.agent;
  const init = await within(agent.request(acp.methods.agent.initialize, { protocolVersion: 1, clientCapabilities: {} }), "initialize");
  assert.equal(init.protocolVersion, 1);
  const waitFor = async (predicate) => {
    for (;;) {
      const found = updates.find(predicate);
      if (found) return found;
      await within(new Promise((resolve) => (changed = resolve)), "a matching session/update");
    }
  };
  const stop = async () => {
    child.stdin.end();
    const result = await within(exited, "bridge exit");
    return result;
  };
  return Object.assign(bridge, { child, agent, updates, asked, waitFor, stop, exited, init });
}

const of = (updates, sessionId, kind) =>
  updates.filter((n) => n.sessionId === sessionId && (!kind || n.update.sessionUpdate === kind)).map((n) => n.update);
const textOf = (updates, sessionId, kind = "agent_message_chunk") =>
  of(updates, sessionId, kind).map((u) => u.content.text).join("");

async function newSession(agent, cwd, model) {
  const session = await within(agent.request(acp.methods.agent.session.new, { cwd, mcpServers: [] }), "session/new");
  if (model) {
    await agent.request(acp.methods.agent.session.setConfigOption, { sessionId: session.sessionId, configId: "model", value: `fake/${model}` });
  }
  return session;
}

const ask = (agent, sessionId, text) =>
  within(agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text }] }), "session/prompt");

function alive(pid) {
  try {
    process.kill(pid, 0);
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return !/^\d+ \(.*\) Z/.test(stat);
  } catch {
    return false;
  }
}

function descendants(pid) {
  const out = [];
  const walk = (p) => {
    const path = `/proc/${p}/task/${p}/children`;
    if (!existsSync(path)) return;
    for (const c of readFileSync(path, "utf8").trim().split(/\s+/).filter(Boolean)) {
      out.push(Number(c));
      walk(Number(c));
    }
  };
  walk(pid);
  return out;
}

const comm = (pid) => {
  try {
    return readFileSync(`/proc/${pid}/comm`, "utf8").trim();
  } catch {
    return "";
  }
};

test("streams, thinks, runs bash, edits with a diff, fails clearly, cancels, and keeps the conversation", async () => {
  const cwd = mkdtempSync(join(tmpdir(), "acp-ts-"));
  const agentDir = mkdtempSync(join(tmpdir(), "acp-ts-agent-"));
  // the scripted model, and a pi agent dir pointing at it, shared by both bridges of this test
  const model = spawn(PYTHON, ["-m", "bridge.scripted_model", "--agent-dir", agentDir], { stdio: ["ignore", "pipe", "ignore"] });
  await within(new Promise((resolve) => model.stdout.once("data", resolve)), "scripted model start");
  const bridge = await startBridge(cwd, agentDir);
  const { agent, updates } = bridge;
  try {
    assert.equal(bridge.init.agentCapabilities.loadSession, true);
    assert.equal(bridge.init.agentCapabilities.promptCapabilities.embeddedContext, true);
    assert.deepEqual(bridge.init.authMethods.map((m) => [m.id, m.type]), [["pi-api-key", "env_var"], ["pi-login", "terminal"]]);

    // a streamed answer, no banner
    const { sessionId, configOptions } = await newSession(agent, cwd);
    assert.ok(configOptions.find((o) => o.id === "model").options.some((o) => o.value === "fake/tool"));
    const first = await ask(agent, sessionId, "Say hello");
    assert.equal(first.stopReason, "end_turn");
    const chunks = of(updates, sessionId, "agent_message_chunk");
    assert.ok(chunks.length > 3, "the answer streams in pieces");
    assert.match(chunks[0].content.text, /^Hello/, "the first chunk is the answer, not a banner");
    const used1 = of(updates, sessionId, "usage_update").at(-1).used;

    // thinking
    await agent.request(acp.methods.agent.session.setConfigOption, { sessionId, configId: "model", value: "fake/thinking" });
    await ask(agent, sessionId, "Think");
    assert.ok(textOf(updates, sessionId, "agent_thought_chunk").length > 0);
    const used2 = of(updates, sessionId, "usage_update").at(-1).used;
    assert.ok(used2 > used1, "the second prompt's context holds the first exchange");

    // bash with its output
    await agent.request(acp.methods.agent.session.setConfigOption, { sessionId, configId: "model", value: "fake/tool" });
    await ask(agent, sessionId, "Run echo hi");
    const call = of(updates, sessionId, "tool_call").at(-1);
    assert.deepEqual([call.kind, call.title, call.status], ["execute", "echo hi", "pending"]);
    const done = of(updates, sessionId, "tool_call_update").filter((u) => u.toolCallId === call.toolCallId);
    assert.equal(done.at(-1).status, "completed");
    assert.equal(done.at(-1).content[0].content.text.trim(), "hi");

    // an edit with its diff
    writeFileSync(join(cwd, "notes.txt"), "line one\nline two\nline three\n");
    await agent.request(acp.methods.agent.session.setConfigOption, { sessionId, configId: "model", value: "fake/edit" });
    await ask(agent, sessionId, "Edit the notes");
    const edit = of(updates, sessionId, "tool_call").at(-1);
    assert.equal(edit.kind, "edit");
    const diff = of(updates, sessionId, "tool_call_update")
      .filter((u) => u.toolCallId === edit.toolCallId && u.status === "completed")[0]
      .content.find((c) => c.type === "diff");
    assert.equal(diff.path, join(cwd, "notes.txt"));
    assert.equal(diff.oldText, "line one\nline two\nline three\n");
    assert.equal(diff.newText, "line one\nline 2, edited\nline three\n");

    // a model error is a JSON-RPC error, never an empty end_turn
    await agent.request(acp.methods.agent.session.setConfigOption, { sessionId, configId: "model", value: "fake/err500" });
    await assert.rejects(ask(agent, sessionId, "fail"), (error) => {
      assert.equal(error.code, -32000);
      assert.equal(error.data.kind, "server");
      assert.equal(error.data.retryable, true);
      return true;
    });

    // cancel mid-tool: answered cancelled once the tool's sleep is gone
    await agent.request(acp.methods.agent.session.setConfigOption, { sessionId, configId: "model", value: "fake/toolslow" });
    const calls = of(updates, sessionId, "tool_call").length;
    const running = ask(agent, sessionId, "sleep");
    await bridge.waitFor((n) => n.sessionId === sessionId && n.update.sessionUpdate === "tool_call" && of(updates, sessionId, "tool_call").length > calls);
    let sleeper;
    for (let i = 0; i < 600 && !sleeper; i++) {
      sleeper = descendants(bridge.child.pid).find((p) => comm(p) === "sleep");
      if (!sleeper) await new Promise((r) => setTimeout(r, 50));
    }
    assert.ok(sleeper, "bash started sleep");
    await agent.notify(acp.methods.agent.session.cancel, { sessionId });
    assert.equal((await running).stopReason, "cancelled");
    assert.equal(alive(sleeper), false, "the sleep is gone when the prompt answers cancelled");

    // session/list
    const listed = await agent.request(acp.methods.agent.session.list, { cwd });
    const mine = listed.sessions.find((s) => s.sessionId === sessionId);
    assert.ok(mine && mine.title && mine.updatedAt);
  } finally {
    assert.equal((await bridge.stop()).code, 0);
  }

  // session/load in a fresh bridge replays what was streamed
  const fresh = await startBridge(cwd, agentDir);
  try {
    const sid = updates[0].sessionId;
    await within(fresh.agent.request(acp.methods.agent.session.load, { sessionId: sid, cwd, mcpServers: [] }), "session/load");
    assert.equal(textOf(fresh.updates, sid, "user_message_chunk"), "Say helloThinkRun echo hiEdit the notesfailsleep");
    const streamedText = textOf(updates, sid);
    assert.ok(streamedText.startsWith(textOf(fresh.updates, sid).slice(0, 40)));
    const streamedCalls = of(updates, sid, "tool_call").map((u) => u.toolCallId);
    assert.deepEqual(of(fresh.updates, sid, "tool_call").map((u) => u.toolCallId), streamedCalls);
  } finally {
    assert.equal((await fresh.stop()).code, 0);
    model.kill("SIGTERM");
  }
});

test("hostile frames get JSON-RPC errors and the connection keeps serving", async () => {
  const cwd = mkdtempSync(join(tmpdir(), "acp-ts-"));
  const bridge = await startBridge(cwd);
  try {
    await assert.rejects(bridge.agent.request("no/such/method", {}), (e) => e.code === -32601);
    await assert.rejects(bridge.agent.request(acp.methods.agent.session.prompt, { sessionId: "nope", prompt: [{ type: "text", text: "x" }] }), (e) => e.code === -32002);
    await assert.rejects(bridge.agent.request(acp.methods.agent.session.new, { cwd: 5, mcpServers: [] }), (e) => e.code === -32602);
    const { sessionId } = await newSession(bridge.agent, cwd);
    assert.equal((await ask(bridge.agent, sessionId, "still serving")).stopReason, "end_turn");
  } finally {
    assert.equal((await bridge.stop()).code, 0);
  }
});

test("asks before acting: session/request_permission approves or rejects, session/set_mode plan refuses, session/cancel withdraws", async () => {
  const cwd = mkdtempSync(join(tmpdir(), "acp-ts-"));
  const bridge = await startBridge(cwd);
  const { agent, updates, asked } = bridge;
  const compound = join(cwd, "compound.txt");
  const ends = (sessionId) => of(updates, sessionId, "tool_call_update").filter((u) => u.status === "completed" || u.status === "failed");
  try {
    const { sessionId, modes, configOptions } = await newSession(agent, cwd, "toolcompound");
    assert.equal(modes.currentModeId, "ask");
    assert.deepEqual(modes.availableModes.map((m) => m.id), ["ask", "auto-edit", "plan", "full"]);
    assert.equal(configOptions.find((o) => o.id === "mode").category, "mode");

    // reject: nothing ran, the tool call failed, the turn ends
    bridge.answer = choose("reject_once");
    assert.equal((await ask(agent, sessionId, "run it")).stopReason, "end_turn");
    assert.equal(asked.length, 1);
    assert.equal(asked[0].toolCall.title, "echo hi && touch compound.txt");
    assert.deepEqual(asked[0].options.map((o) => o.kind), ["allow_once", "reject_once"]);
    assert.equal(ends(sessionId).at(-1).status, "failed");
    assert.equal(existsSync(compound), false, "rejected: nothing ran");

    // approve: it ran
    bridge.answer = choose("allow_once");
    assert.equal((await ask(agent, sessionId, "run it")).stopReason, "end_turn");
    assert.equal(asked.length, 2);
    assert.equal(ends(sessionId).at(-1).status, "completed");
    assert.equal(existsSync(compound), true, "approved: it ran");

    // session/cancel while the client is asked: the prompt answers cancelled, the request is withdrawn
    let withdrawn;
    const aborted = new Promise((resolve) => (withdrawn = resolve));
    bridge.answer = (params, signal) =>
      new Promise((resolve) => signal.addEventListener("abort", () => { withdrawn(); resolve({ outcome: { outcome: "cancelled" } }); }));
    const running = ask(agent, sessionId, "run it");
    await bridge.waitFor(() => asked.length === 3);
    await agent.notify(acp.methods.agent.session.cancel, { sessionId });
    assert.equal((await running).stopReason, "cancelled");
    await within(aborted, "$/cancel_request for the pending request");

    // plan mode: an edit is refused without asking
    await within(agent.request(acp.methods.agent.session.setMode, { sessionId, modeId: "plan" }), "session/set_mode");
    await bridge.waitFor((n) => n.sessionId === sessionId && n.update.sessionUpdate === "current_mode_update" && n.update.currentModeId === "plan");
    await agent.request(acp.methods.agent.session.setConfigOption, { sessionId, configId: "model", value: "fake/write" });
    assert.equal((await ask(agent, sessionId, "write it")).stopReason, "end_turn");
    assert.equal(asked.length, 3, "plan mode asks nothing");
    assert.equal(ends(sessionId).at(-1).status, "failed");
    assert.equal(existsSync(join(cwd, "created", "new.txt")), false);
    await assert.rejects(agent.request(acp.methods.agent.session.setMode, { sessionId, modeId: "yolo" }), (e) => e.code === -32602);
  } finally {
    assert.equal((await bridge.stop()).code, 0);
  }
});

test("the toolbox: commands after session/new, a title, resume after close, delete", async () => {
  const cwd = mkdtempSync(join(tmpdir(), "acp-ts-toolbox-"));
  const bridge = await startBridge(cwd);
  const { agent, updates, init } = bridge;
  const isKind = (sessionId, kind) => (n) => n.sessionId === sessionId && n.update.sessionUpdate === kind;
  try {
    const caps = init.agentCapabilities.sessionCapabilities;
    assert.ok(caps.resume && caps.delete, "resume and delete are advertised");
    const { sessionId } = await newSession(agent, cwd, "echo");
    const listed = (await bridge.waitFor(isKind(sessionId, "available_commands_update"))).update.availableCommands;
    assert.deepEqual(listed.slice(0, 4).map((c) => c.name), ["compact", "autocompact", "name", "export"]);
    assert.equal(listed.find((c) => c.name === "name").input.hint, "<title>");

    assert.equal((await ask(agent, sessionId, "remember ts-kept-4f0")).stopReason, "end_turn");
    assert.equal((await ask(agent, sessionId, "/name TS title")).stopReason, "end_turn");
    assert.equal((await bridge.waitFor(isKind(sessionId, "session_info_update"))).update.title, "TS title");
    await within(agent.request(acp.methods.agent.session.setTitle, { sessionId, title: "Set by the client" }), "session/set_title");
    await bridge.waitFor((n) => isKind(sessionId, "session_info_update")(n) && n.update.title === "Set by the client");
    const titled = await within(agent.request(acp.methods.agent.session.list, { cwd }), "session/list");
    assert.equal(titled.sessions.find((s) => s.sessionId === sessionId).title, "Set by the client");

    // closed, then resumed without a replay: the conversation goes on
    await within(agent.request(acp.methods.agent.session.close, { sessionId }), "session/close");
    const before = updates.length;
    await within(agent.request(acp.methods.agent.session.resume, { sessionId, cwd, mcpServers: [] }), "session/resume");
    await agent.request(acp.methods.agent.session.setConfigOption, { sessionId, configId: "model", value: "fake/echo" });
    assert.equal((await ask(agent, sessionId, "again")).stopReason, "end_turn");
    assert.equal(updates.slice(before).filter(isKind(sessionId, "user_message_chunk")).length, 0, "no replay");
    assert.equal(textOf(updates.slice(before), sessionId), "ECHO:again");

    await within(agent.request(acp.methods.agent.session.delete, { sessionId }), "session/delete");
    const after = await within(agent.request(acp.methods.agent.session.list, { cwd }), "session/list");
    assert.equal(after.sessions.some((s) => s.sessionId === sessionId), false);
    await assert.rejects(agent.request(acp.methods.agent.session.resume, { sessionId, cwd, mcpServers: [] }), (e) => e.code === -32002);
  } finally {
    assert.equal((await bridge.stop()).code, 0);
  }
});

/** acpx (a headless ACP client) runs one prompt against `pi-bridge acp` with its permission flag;
 * its home and the bridge's state dir are throwaway. Resolves to {code, stdout}. */
const ACPX = join(dirname(fileURLToPath(import.meta.url)), "..", "node_modules", ".bin", "acpx");

function acpx(cwd, flag, model) {
  const env = {
    ...process.env,
    HOME: mkdtempSync(join(tmpdir(), "acp-ts-acpx-home-")),
    PI_BRIDGE_STATE_DIR: mkdtempSync(join(tmpdir(), "acp-ts-state-")),
  };
  const args = ["--agent", `${PYTHON} -m bridge --scripted-model acp`, "--cwd", cwd, flag, "--model", model, "--format", "json", "exec", "run it"];
  return new Promise((resolve) => {
    execFile(ACPX, args, { cwd, env, timeout: WAIT_MS }, (error, stdout) => resolve({ code: error ? error.code : 0, stdout }));
  });
}

test("acpx --approve-all runs the command, --deny-all runs nothing and exits permission-denied", { skip: !existsSync(ACPX) && "acpx is not installed (ci.sh installs it)" }, async () => {
  const approved = mkdtempSync(join(tmpdir(), "acp-ts-"));
  const yes = await acpx(approved, "--approve-all", "fake/toolcompound");
  assert.equal(yes.code, 0, yes.stdout.slice(-500));
  assert.match(yes.stdout, /"method":"session\/request_permission"/, "the bridge asked");
  assert.equal(existsSync(join(approved, "compound.txt")), true, "approved: it ran");

  const denied = mkdtempSync(join(tmpdir(), "acp-ts-"));
  const no = await acpx(denied, "--deny-all", "fake/toolcompound");
  assert.equal(no.code, 5, "acpx's exit code for a denied permission");
  assert.match(no.stdout, /"status":"failed"/);
  assert.match(no.stdout, /"stopReason":"end_turn"/, "the turn still ends");
  assert.equal(existsSync(join(denied, "compound.txt")), false, "denied: nothing ran");
});
