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
 *
 * A `write` the gate lets through first tells the bridge what its file held, read here just
 * before pi writes it: a `setStatus` whose key is ORIGINAL_KEY and whose text is
 * `{"toolCallId", "exists", "text"?}` (bridge/agents/pi/file_changes.py). The bridge's own read
 * of the file races pi's write; this one cannot, so the diff's old text is never lost. A file
 * that is not a regular one, or is too big to diff, is not read, and nothing is told.
 */

import { closeSync, constants, existsSync, fstatSync, openSync, readFileSync, readSync, realpathSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, isAbsolute, join, resolve, sep } from "node:path";
import { createBashToolDefinition } from "@earendil-works/pi-coding-agent";

const MARKER = "pi-bridge:permission";
const ORIGINAL_KEY = "pi-bridge:original";
// The bridge's diffs carry no texts past this (bridge/engines/diff_capture.py MAX_DIFF_BYTES).
const MAX_DIFF_BYTES = 1024 * 1024;
const KERNEL_TREES = ["/proc", "/sys", "/dev"];
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
			// The seccomp filter goes to bwrap on fd 3 (its prefix says `--seccomp 3`), opened by this shell.
			const filter: unknown = (box as { seccomp?: unknown }).seccomp;
			const opened = typeof filter === "string" ? ` 3<${quoted(filter)}` : "";
			const confined = createBashToolDefinition(process.cwd(), {
				spawnHook: ({ command, cwd, env }: { command: string; cwd: string; env: any }) => ({
					command: `exec ${box.prefix.map(quoted).join(" ")} bash -c ${quoted(command)}${opened}`,
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
		const verdict = mode === "full" ? undefined : await ask(ctx, event);
		if (verdict === undefined && event.toolName === "write") tellOriginal(ctx, event);
		return verdict;
	});
}

/** The path pi's file tools use for the model's `path` (pi's resolveToCwd). */
function toolPath(path: string, cwd: string): string {
	let normalized = path.replace(/[\u00a0\u2000-\u200a\u202f\u205f\u3000]/g, " ").replace(/^@/, "");
	if (normalized === "~") normalized = homedir();
	else if (normalized.startsWith("~/")) normalized = join(homedir(), normalized.slice(2));
	return resolve(cwd, normalized);
}

/** What `path` holds now: missing, its text, or undefined (not a regular file, too big, unreadable).
 * Opened without blocking and judged by the opened descriptor: a FIFO or a device is never read. */
function contentOf(path: string): { exists: boolean; text?: string } | undefined {
	if (KERNEL_TREES.some((tree) => path === tree || path.startsWith(tree + sep))) return undefined;
	let fd: number;
	try {
		fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY);
	} catch (error: any) {
		return error?.code === "ENOENT" ? { exists: false } : undefined;
	}
	try {
		const info = fstatSync(fd);
		if (!info.isFile() || info.size > MAX_DIFF_BYTES) return undefined;
		const buffer = Buffer.alloc(MAX_DIFF_BYTES + 1);
		let size = 0;
		for (let n = 1; n > 0 && size <= MAX_DIFF_BYTES; size += n) {
			n = readSync(fd, buffer, size, MAX_DIFF_BYTES + 1 - size, null);
		}
		return size > MAX_DIFF_BYTES ? undefined : { exists: true, text: buffer.toString("utf8", 0, size) };
	} catch {
		return undefined;
	} finally {
		closeSync(fd);
	}
}

/** Tell the bridge what the file of a `write` about to run holds (see the top of this file). */
function tellOriginal(ctx: any, event: any) {
	const path = event.input?.path;
	if (typeof path !== "string" || !path || typeof ctx.ui?.setStatus !== "function") return;
	const content = contentOf(toolPath(path, ctx.cwd ?? process.cwd()));
	if (content === undefined) return;
	ctx.ui.setStatus(ORIGINAL_KEY, JSON.stringify({ toolCallId: event.toolCallId, ...content }));
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
