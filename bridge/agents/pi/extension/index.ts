/**
 * pi-bridge's gate: before each tool call, pi asks the bridge whether it may run.
 *
 * The bridge loads this file with `-e` on every pi it starts. In `full` mode a call costs one
 * stat of a missing file and no round trip: the bridge writes a conversation's mode to
 * `$PI_BRIDGE_GATE_DIR/<session id>` only when it is not `full`. Otherwise the handler asks the
 * bridge through an `input` dialog whose title is the marker below and whose placeholder is the
 * call as JSON; the bridge answers `{"decision": "allow"|"deny", "reason"?}`. Anything else (a
 * cancelled dialog, bad JSON) is a deny: nothing runs unasked.
 *
 * Without a UI (`--mode json`: `ctx.hasUI` is false) nothing can be asked, so the gate does
 * nothing and every mode runs as `full` there.
 *
 * It also gives pi the conversation's MCP servers: `$PI_BRIDGE_MCP_CONFIG` names a private file
 * (`{"mcpServers": {name: entry}}`, bridge/runs/mcp_config.py) whose servers are registered for
 * this session with `direct` exposure, so the model is offered their tools by name
 * (`mcp__<server>__<tool>`). Their values are the client's literally: pi would expand `$NAME`
 * and run a value starting with `!`, so those are escaped (`$$`, `$!`). A server pi refuses is
 * told to the user once the session starts; the others still connect.
 *
 * The sandbox: when the bridge confines a conversation's commands it writes
 * `$PI_BRIDGE_SANDBOX_DIR/<session id>` (bridge/runs/sandbox.py): the mode, the workspace and
 * bubblewrap's argv prefix. The bash tool's spawn is then wrapped in that prefix, and pi's own
 * write and edit tools are held to the workspace: outside it a call is refused, or asked in `ask`
 * mode. No file: the conversation runs unconfined. A file that cannot be read: nothing runs.
 */

import { existsSync, readFileSync, realpathSync } from "node:fs";
import { dirname, isAbsolute, join, resolve, sep } from "node:path";
import { createBashToolDefinition } from "@earendil-works/pi-coding-agent";

const MARKER = "pi-bridge:permission";
const GATE_DIR = process.env.PI_BRIDGE_GATE_DIR;
const MCP_CONFIG = process.env.PI_BRIDGE_MCP_CONFIG;
// The session ids the bridge names a mode file by (bridge/runs/gate.py); any other asks.
const SAFE_NAME = /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}$/;

function modeOf(sessionId: string | undefined): string {
	if (!sessionId || !SAFE_NAME.test(sessionId)) return "ask"; // no file to read: the bridge decides
	try {
		return readFileSync(join(GATE_DIR as string, sessionId), "utf8").trim() || "full";
	} catch {
		return "full"; // no file: the conversation runs in full mode
	}
}

type Verdict = { decision?: unknown; reason?: unknown };
type Entry = Record<string, unknown>;

/** A value as pi reads it literally: `$` doubled, and a leading `!` (a command to pi) escaped. */
function literal(value: unknown): string {
	const text = String(value).replaceAll("$", "$$$$");
	return text.startsWith("!") ? `$!${text.slice(1)}` : text;
}

function literals(values: unknown): Record<string, string> {
	const out: Record<string, string> = {};
	for (const [name, value] of Object.entries((values ?? {}) as Record<string, unknown>)) {
		out[name] = literal(value);
	}
	return out;
}

/** pi's registration config for one entry of the bridge's file. */
function configOf(entry: Entry): Entry {
	if (entry.type === "http") {
		return { type: "http", url: entry.url, headers: literals(entry.headers), exposure: "direct" };
	}
	return { command: entry.command, args: entry.args ?? [], env: literals(entry.env), exposure: "direct" };
}

/** Register every server of the file; what failed, as lines for the user. */
function registerMcpServers(pi: any): string[] {
	if (!MCP_CONFIG) return [];
	let servers: Record<string, Entry>;
	try {
		servers = JSON.parse(readFileSync(MCP_CONFIG, "utf8")).mcpServers ?? {};
	} catch (error) {
		return [`the bridge's MCP server list could not be read: ${(error as Error).message}`];
	}
	const failed: string[] = [];
	for (const [name, entry] of Object.entries(servers)) {
		try {
			pi.registerMcpServer(name, configOf(entry));
		} catch (error) {
			failed.push(`MCP server ${name}: ${(error as Error).message}`);
		}
	}
	return failed;
}

type Sandbox = { mode: string; workspace: string; prefix: string[]; hidden?: string[] };

const SANDBOX_DIR = process.env.PI_BRIDGE_SANDBOX_DIR;
const FILE_TOOLS = new Set(["write", "edit"]);
const READ_TOOLS = new Set(["read", "grep", "find", "ls"]);

/** The conversation's sandbox; undefined: none; an Error: a file that cannot be read. */
function sandboxOf(sessionId: string | undefined): Sandbox | Error | undefined {
	if (!SANDBOX_DIR || !sessionId || !SAFE_NAME.test(sessionId)) return undefined;
	const path = join(SANDBOX_DIR, sessionId);
	let text: string;
	try {
		text = readFileSync(path, "utf8");
	} catch (error: any) {
		return error?.code === "ENOENT" ? undefined : new Error(`the sandbox cannot be read: ${error}`);
	}
	try {
		const box = JSON.parse(text) as Sandbox;
		if (Array.isArray(box.prefix) && box.prefix.length > 0 && typeof box.workspace === "string") return box;
	} catch {}
	return new Error("the sandbox file is not valid");
}

/** `word` in single quotes, for a POSIX shell. */
function quoted(word: string): string {
	return `'${word.replaceAll("'", `'\\''`)}'`;
}

/** The real path of `path`, or of its nearest existing parent with the rest appended. */
function realOf(path: string): string {
	let head = path;
	let rest = "";
	while (!existsSync(head) && dirname(head) !== head) {
		rest = rest ? join(head.slice(dirname(head).length + 1), rest) : head.slice(dirname(head).length + 1);
		head = dirname(head);
	}
	let real = head;
	try {
		real = realpathSync(head);
	} catch {}
	return rest ? join(real, rest) : real;
}

/** Why pi's write/edit of `path` is outside what the sandbox lets it change (undefined: inside). */
function outsideReason(box: Sandbox, path: unknown, cwd: string): string | undefined {
	if (typeof path !== "string" || !path) return undefined; // pi refuses it itself
	const target = realOf(isAbsolute(path) ? path : resolve(cwd, path.replace(/^@/, "")));
	if (box.mode === "workspace-write" && (target === box.workspace || target.startsWith(box.workspace + sep)))
		return undefined;
	const where = box.mode === "read-only" ? "the sandbox is read-only" : `it is outside the workspace ${box.workspace}`;
	return `sandbox: ${path} may not be changed: ${where}`;
}

/** Why pi's read-only tools may not look at `path`: it is one of the secrets the sandbox hides. */
function hiddenReason(box: Sandbox, path: unknown, cwd: string): string | undefined {
	if (typeof path !== "string" || !path) return undefined;
	const target = realOf(isAbsolute(path) ? path : resolve(cwd, path.replace(/^@/, "")));
	const hidden = (box.hidden ?? []).find((secret) => target === secret || target.startsWith(secret + sep));
	return hidden ? `sandbox: ${path} is hidden from the agent's tools` : undefined;
}

/** The bash tool, its spawn confined by the conversation's sandbox (when it has one). */
function registerSandboxedBash(pi: any) {
	const plain = createBashToolDefinition(process.cwd());
	pi.registerTool({
		...plain,
		async execute(id: string, params: any, signal: any, onUpdate: any, ctx: any) {
			const box = sandboxOf(ctx?.sessionManager?.getSessionId?.());
			if (box instanceof Error) throw box;
			if (box === undefined) return plain.execute(id, params, signal, onUpdate, ctx);
			const confined = createBashToolDefinition(process.cwd(), {
				spawnHook: ({ command, cwd, env }: { command: string; cwd: string; env: any }) => ({
					command: `exec ${box.prefix.map(quoted).join(" ")} bash -c ${quoted(command)}`,
					cwd,
					env,
				}),
			});
			return confined.execute(id, params, signal, onUpdate, ctx);
		},
	});
}

export default function (pi: any) {
	const failed = registerMcpServers(pi);
	if (failed.length) {
		pi.on("session_start", async (_event: any, ctx: any) => {
			ctx.ui?.notify?.(failed.join("\n"), "error");
		});
	}
	if (SANDBOX_DIR) registerSandboxedBash(pi);
	if (!GATE_DIR) return;
	pi.on("tool_call", async (event: any, ctx: any) => {
		if (!ctx.hasUI) return undefined;
		const sessionId = ctx.sessionManager?.getSessionId?.();
		const mode = modeOf(sessionId);
		if (READ_TOOLS.has(event.toolName)) {
			const box = sandboxOf(sessionId);
			if (box instanceof Error) return { block: true, reason: box.message };
			const hidden = box && hiddenReason(box, event.input?.path, ctx.cwd ?? process.cwd());
			if (hidden) return { block: true, reason: hidden };
		}
		if (FILE_TOOLS.has(event.toolName)) {
			const box = sandboxOf(sessionId);
			if (box instanceof Error) return { block: true, reason: box.message };
			const outside = box && outsideReason(box, event.input?.path, ctx.cwd ?? process.cwd());
			// Outside the sandbox: refused, unless the user is asked about every call anyway.
			if (outside && mode !== "ask") return { block: true, reason: outside };
			if (outside) return ask(ctx, event);
		}
		if (mode === "full") return undefined;
		return ask(ctx, event);
	});
}

/** Ask the bridge about one tool call; anything but an allow blocks it. */
async function ask(ctx: any, event: any) {
	const payload = JSON.stringify({
		toolCallId: event.toolCallId,
		toolName: event.toolName,
		input: event.input,
	});
	const answer: string | undefined = await ctx.ui.input(MARKER, payload);
	let verdict: Verdict = {};
	try {
		verdict = answer ? (JSON.parse(answer) as Verdict) : {};
	} catch {
		verdict = {};
	}
	if (verdict.decision === "allow") return undefined;
	const reason = typeof verdict.reason === "string" && verdict.reason ? verdict.reason : "denied";
	return { block: true, reason };
}
