/**
 * pi-bridge's gate: before each tool call, pi asks the bridge whether it may run.
 *
 * The bridge loads this file with `-e` on every pi it starts. In `full` mode a call costs one
 * read of a small file and no round trip: the bridge writes each conversation's mode to
 * `$PI_BRIDGE_GATE_DIR/<session id>`, `full` included, and a missing or unreadable file is `ask`
 * (so deleting it never turns asking off). Otherwise the handler asks the bridge through an
 * `input` dialog whose title is the marker below and whose placeholder is the call as JSON, with
 * `resolvedPath`: the call's path as pi's file tools resolve it (file URLs, `~`, `@`, unicode
 * spaces); the bridge follows its symlinks and judges that. It answers
 * `{"decision": "allow"|"deny", "reason"?}`; anything else (a cancelled dialog, bad JSON) is a
 * deny: nothing runs unasked.
 *
 * The file tools: pi's read, write, edit, ls, find and grep are registered again with their
 * operations handed to the bridge over the same channel (title FS_MARKER, payload
 * `{toolCallId, tool, op, path, data?, write?}`), answered `{"error"}` (thrown) or the result:
 * the bridge judges and does every file operation with one policy (bridge/policy/file_access.py),
 * race-free where Node cannot be (no openat here). pi has resolved the path when an operation
 * runs. fd (find) and ripgrep (grep) still walk the tree themselves: the bridge judges their root.
 * `PI_BRIDGE_FS_LOCAL=1` keeps pi's own operations (the benchmark's baseline).
 *
 * Without a UI (`--mode json`: `ctx.hasUI` is false) nothing can be asked or handed over: the
 * gate does nothing, every mode runs as `full`, and the file tools refuse locally what is always
 * kept out (/proc, /sys, /dev, the bridge's state dir, pi's auth.json), symlinks followed.
 *
 * It also gives pi the conversation's MCP servers: `$PI_BRIDGE_MCP_CONFIG` names a private file
 * (`{"mcpServers": {name: entry}}`, bridge/runs/mcp_config.py) whose servers are registered for
 * this session with `direct` exposure, so the model is offered their tools by name
 * (`mcp__<server>__<tool>`). Their values are the client's literally: pi would expand `$NAME`
 * and run a value starting with `!`, so those are escaped (`$$`, `$!`). A server pi refuses is
 * told to the user once the session starts; the others still connect.
 *
 * The sandbox: when the bridge confines a conversation's commands it writes
 * `$PI_BRIDGE_SANDBOX_DIR/<session id>` (bridge/policy/sandbox.py): the mode, the workspace and
 * bubblewrap's argv prefix. The bash tool's spawn is then wrapped in that prefix; pi's own file
 * tools are held to the sandbox by the bridge's policy. No file: the conversation runs
 * unconfined. A file that cannot be read: nothing runs.
 *
 * The editor's terminal: with a UI, the bash tool first hands its command to the bridge (title
 * BASH_MARKER, `{toolCallId, op: "exec", cwd, command}`). An editor that runs terminals (ACP's
 * `terminal/create`) runs it there, wrapped in the sandbox by the bridge; the tool then polls it
 * (`{op: "poll", terminalId}`, each answer the output so far, streamed as the partial result,
 * until `done` with `exitCode` or `signal`) and ends it on abort or timeout (`{op: "kill"}`).
 * The answer `{"local": true}`: no such editor, the tool runs the command itself as below. The
 * bridge marks its mode dir (EDITOR_TERMINAL_MARK) once its editor runs terminals: without the
 * mark, the tool runs the command itself with no round trip.
 *
 * A `write` (and an `edit`, through the bridge's write) tells the bridge what its file held: a `setStatus` whose key is ORIGINAL_KEY and
 * whose text is `{"toolCallId", "exists", "text"?}` (bridge/agents/pi/file_changes.py). The
 * bridge's write operation answers it (read from the very descriptor it writes); without a UI it
 * is read here just before pi writes. A file that is not a regular one, or is too big to diff, is
 * not told.
 */

import { closeSync, constants, existsSync, fstatSync, lstatSync, openSync, readFileSync, readlinkSync, readSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, isAbsolute, join, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import {
	createBashToolDefinition,
	createEditToolDefinition,
	createFindToolDefinition,
	createGrepToolDefinition,
	createLsToolDefinition,
	createReadToolDefinition,
	createWriteToolDefinition,
} from "@earendil-works/pi-coding-agent";
import { registerSecrets, scrubbedEnv } from "./secrets.ts";
import { PLAN_TOOL, registerTodo, TODO_TOOL } from "./todo.ts";

const MARKER = "pi-bridge:permission";
const FS_MARKER = "pi-bridge:fs";
const BASH_MARKER = "pi-bridge:bash";
const EDITOR_TERMINAL_MARK = ".editor-terminal"; // bridge/policy/gate.py
const ORIGINAL_KEY = "pi-bridge:original";
// The bridge's diffs carry no texts past this (bridge/engines/diff_capture.py MAX_DIFF_BYTES).
const MAX_DIFF_BYTES = 1024 * 1024;
const KERNEL_TREES = ["/proc", "/sys", "/dev"];
const GATE_DIR = process.env.PI_BRIDGE_GATE_DIR;
const MCP_CONFIG = process.env.PI_BRIDGE_MCP_CONFIG;
// The session ids the bridge names a mode file by (bridge/policy/gate.py); any other asks.
const SAFE_NAME = /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}$/;

function modeOf(sessionId: string | undefined): string {
	if (!sessionId || !SAFE_NAME.test(sessionId)) return "ask"; // no file to read: the bridge decides
	try {
		return readFileSync(join(GATE_DIR as string, sessionId), "utf8").trim() || "ask";
	} catch {
		return "ask"; // no file, or one that cannot be read: ask (a deleted file never means `full`)
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
const FILE_TOOLS = new Set(["read", "write", "edit", "ls", "find", "grep"]);
const FS_LOCAL = process.env.PI_BRIDGE_FS_LOCAL === "1";

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

/** The bash tool, its spawn confined by the conversation's sandbox (when it has one). */
function registerSandboxedBash(pi: any) {
	const plain = createBashToolDefinition(process.cwd(), {
		spawnHook: ({ command, cwd, env }: { command: string; cwd: string; env: any }) => ({ command, cwd, env: scrubbedEnv(env) }),
	});
	pi.registerTool({
		...plain,
		defaultActive: false, // bash stays on or off as pi and its user have it
		async execute(id: string, params: any, signal: any, onUpdate: any, ctx: any) {
			if (ctx?.hasUI && GATE_DIR && !FS_LOCAL && existsSync(join(GATE_DIR, EDITOR_TERMINAL_MARK))) {
				const cwd = ctx?.cwd ?? process.cwd();
				const started = await bashCall(ctx, { toolCallId: id, op: "exec", cwd, command: String(params?.command ?? "") });
				if (started.local !== true) return inTerminal(ctx, id, String(started.terminalId), params, signal, onUpdate);
			}
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
					env: scrubbedEnv(env),
				}),
			});
			return confined.execute(id, params, signal, onUpdate, ctx);
		},
	});
}

type BashAnswer = { error?: unknown; local?: unknown; terminalId?: unknown; output?: unknown; done?: unknown; exitCode?: unknown; signal?: unknown };

/** One step of a command in the editor's terminal (see the top of this file); its error is thrown. */
async function bashCall(ctx: any, payload: Entry): Promise<BashAnswer> {
	const answer: string | undefined = await ctx.ui.input(BASH_MARKER, JSON.stringify(payload));
	let value: BashAnswer;
	try {
		value = answer ? (JSON.parse(answer) as BashAnswer) : { error: "refused: the bridge gave no answer" };
	} catch {
		value = { error: "refused: the bridge's answer is not valid" };
	}
	if (value.error !== undefined) throw new Error(String(value.error));
	return value;
}

/** `text` with a status line after it, as pi's bash tool ends its output. */
function withStatus(text: string, status: string): string {
	return text ? `${text}\n\n${status}` : status;
}

/** The command the editor's terminal runs: polled until it ends, its output streamed; killed on
 * abort or past the call's timeout. */
async function inTerminal(ctx: any, id: string, terminalId: string, params: any, signal: any, onUpdate: any) {
	const step = (op: string) => bashCall(ctx, { toolCallId: id, op, terminalId });
	const seconds = typeof params?.timeout === "number" && params.timeout > 0 ? params.timeout : undefined;
	const started = Date.now();
	let shown = "";
	onUpdate?.({ content: [], details: undefined });
	for (;;) {
		if (signal?.aborted) {
			await step("kill").catch(() => undefined);
			throw new Error(withStatus(shown, "Command aborted"));
		}
		if (seconds !== undefined && Date.now() - started > seconds * 1000) {
			await step("kill").catch(() => undefined);
			throw new Error(withStatus(shown, `Command timed out after ${seconds} seconds`));
		}
		const state = await step("poll");
		const output = typeof state.output === "string" ? state.output : shown;
		if (output !== shown) {
			shown = output;
			onUpdate?.({ content: [{ type: "text", text: output }], details: {} });
		}
		if (state.done !== true) continue;
		if (typeof state.signal === "string") throw new Error(withStatus(output, `Command killed by ${state.signal}`));
		if (typeof state.exitCode !== "number") throw new Error(withStatus(output, "Command terminated without an exit code"));
		if (state.exitCode !== 0) {
			const text = withStatus(output, `Command exited with code ${state.exitCode}`);
			return { content: [{ type: "text", text }], details: {}, isError: true };
		}
		return { content: [{ type: "text", text: output || "(no output)" }], details: {} };
	}
}

export default function (pi: any) {
	const failed = registerMcpServers(pi);
	if (failed.length) {
		pi.on("session_start", async (_event: any, ctx: any) => {
			ctx.ui?.notify?.(failed.join("\n"), "error");
		});
	}
	registerSecrets(pi);
	registerSandboxedBash(pi); // its env scrubbed (secrets.ts), confined when a sandbox says so
	registerTodo(pi); // the plan tool, when the client turned it on (todo.ts)
	if (!GATE_DIR) return;
	if (!FS_LOCAL) registerFileTools(pi);
	pi.on("tool_call", async (event: any, ctx: any) => {
		if (!ctx.hasUI) {
			if (event.toolName === "write") tellOriginal(ctx, event); // the UI path tells it from the bridge
			return undefined;
		}
		if (PLAN_TOOL && event.toolName === TODO_TOOL) return undefined; // pi's memory only: nothing to ask
		const sessionId = ctx.sessionManager?.getSessionId?.();
		const mode = modeOf(sessionId);
		if (FILE_TOOLS.has(event.toolName)) {
			const box = sandboxOf(sessionId);
			if (box instanceof Error) return { block: true, reason: box.message };
		}
		const verdict = mode === "full" ? undefined : await ask(ctx, event);
		if (verdict === undefined && FS_LOCAL && event.toolName === "write") tellOriginal(ctx, event);
		return verdict;
	});
}

type FsAnswer = { error?: unknown; data?: unknown; kind?: unknown; names?: unknown };
type Create = (cwd: string, options?: any) => any;
const CREATORS: Record<string, Create> = {
	read: createReadToolDefinition,
	write: createWriteToolDefinition,
	edit: createEditToolDefinition,
	ls: createLsToolDefinition,
	find: createFindToolDefinition,
	grep: createGrepToolDefinition,
};

/** One file operation done by the bridge (see the top of this file); its error is thrown. */
async function fsCall(ctx: any, id: string, tool: string, op: string, path: string, extra: Entry = {}): Promise<FsAnswer> {
	const answer: string | undefined = await ctx.ui.input(FS_MARKER, JSON.stringify({ toolCallId: id, tool, op, path, ...extra }));
	let value: FsAnswer;
	try {
		value = answer ? (JSON.parse(answer) as FsAnswer) : { error: "refused: the bridge gave no answer" };
	} catch {
		value = { error: "refused: the bridge's answer is not valid" };
	}
	if (value.error !== undefined) throw new Error(String(value.error));
	return value;
}

function bytesOf(answer: FsAnswer): Buffer {
	return Buffer.from(typeof answer.data === "string" ? answer.data : "", "base64");
}

const IMAGE_MAGIC: [string, number[]][] = [
	["image/png", [0x89, 0x50, 0x4e, 0x47]],
	["image/jpeg", [0xff, 0xd8, 0xff]],
	["image/gif", [0x47, 0x49, 0x46, 0x38]],
];

function imageType(bytes: Buffer): string | null {
	for (const [type, magic] of IMAGE_MAGIC) if (magic.every((b, i) => bytes[i] === b)) return type;
	const webp = bytes.length > 12 && bytes.toString("latin1", 0, 4) === "RIFF" && bytes.toString("latin1", 8, 12) === "WEBP";
	return webp ? "image/webp" : null;
}

/** The operations of one call of `tool`, each one done by the bridge. A read fetches the file
 * once (at `access`) and serves its bytes from there; ls learns each entry's kind with the list. */
function bridgeOperations(ctx: any, id: string, tool: string): any {
	const call = (op: string, path: string, extra?: Entry) => fsCall(ctx, id, tool, op, path, extra);
	const read = new Map<string, Buffer>();
	const kinds = new Map<string, string>();
	const fetch = async (path: string) => {
		let bytes = read.get(path);
		if (bytes === undefined) {
			bytes = bytesOf(await call("read", path));
			read.set(path, bytes);
		}
		return bytes;
	};
	const kindOf = async (path: string) => kinds.get(path) ?? String((await call("kind", path)).kind);
	return {
		readFile: fetch,
		access: async (path: string) => {
			if (tool === "read") await fetch(path);
			else await call("access", path, { write: tool === "edit" });
		},
		detectImageMimeType: async (path: string) => imageType(await fetch(path)),
		writeFile: async (path: string, content: string) => {
			const answer = await call("write", path, { data: Buffer.from(content, "utf8").toString("base64") });
			// An edit's too: its patch was made on what the bridge read, the editor's buffer if
			// it holds the file, which the disk (the diff's other source) need not show.
			if ((tool !== "write" && tool !== "edit") || typeof ctx.ui?.setStatus !== "function") return;
			const exists = answer.kind === "file";
			if (exists && typeof answer.data !== "string") return; // too big or not text: not told
			const text = exists ? bytesOf(answer).toString("utf8") : undefined;
			ctx.ui.setStatus(ORIGINAL_KEY, JSON.stringify({ toolCallId: id, exists, ...(exists ? { text } : {}) }));
		},
		// The bridge's write makes a missing parent itself: one round trip per write.
		mkdir: async (_path: string) => {},
		exists: async (path: string) => (await kindOf(path)) !== "missing",
		stat: async (path: string) => {
			const kind = await kindOf(path);
			if (kind === "missing") throw new Error(`ENOENT: no such file or directory, stat '${path}'`);
			return { isDirectory: () => kind === "dir" };
		},
		readdir: async (path: string) => {
			const names = (await call("listdir", path)).names;
			const out: string[] = [];
			for (const name of Array.isArray(names) ? names : []) {
				const dir = String(name).endsWith("/");
				const bare = dir ? String(name).slice(0, -1) : String(name);
				kinds.set(join(path, bare), dir ? "dir" : "file");
				out.push(bare);
			}
			return out;
		},
		isDirectory: async (path: string) => (await kindOf(path)) === "dir",
	};
}

/** The path pi's tool resolves from the call's `path` (find and grep: the search root). */
function rootOf(params: any, cwd: string): string {
	return toolPath(typeof params?.path === "string" && params.path ? params.path : ".", cwd);
}

/** pi's file tools, their file operations done by the bridge (see the top of this file). */
function registerFileTools(pi: any) {
	for (const [name, create] of Object.entries(CREATORS)) {
		const plain = create(process.cwd());
		pi.registerTool({
			...plain,
			// An override replaces pi's tool of that name, never adds one: which tools the model
			// has stays pi's choice (ls, find and grep are off unless the user turned them on).
			defaultActive: false,
			async execute(id: string, params: any, signal: any, onUpdate: any, ctx: any) {
				const cwd = ctx?.cwd ?? process.cwd();
				if (!ctx?.hasUI) {
					const path = name === "find" || name === "grep" || name === "ls" ? rootOf(params, cwd) : toolPath(String(params?.path ?? ""), cwd);
					const refused = keptOutLocally(path);
					if (refused) throw new Error(refused);
					return create(cwd).execute(id, params, signal, onUpdate, ctx);
				}
				const operations = bridgeOperations(ctx, id, name);
				if (name === "find" || name === "grep") {
					// fd and ripgrep walk the tree themselves: the bridge judges the root first.
					const root = rootOf(params, cwd);
					const kind = (await fsCall(ctx, id, name, "search", root)).kind;
					if (name === "grep") operations.isDirectory = async () => kind === "dir";
					if (kind === "missing") throw new Error(`Path not found: ${root}`);
					if (name === "find") return create(cwd).execute(id, params, signal, onUpdate, ctx);
				}
				return create(cwd, { operations }).execute(id, params, signal, onUpdate, ctx);
			},
		});
	}
}

/** The path with every symlink followed, a dangling one by its target (no dir fds in Node: this
 * is only the json mode's check, the bridge's own policy is race-free). */
function followed(path: string): string {
	let done = "/";
	const pending = path.split("/").reverse();
	for (let hops = 0; pending.length > 0; ) {
		const name = pending.pop() as string;
		if (name === "" || name === ".") continue;
		if (name === "..") {
			done = dirname(done);
			continue;
		}
		const here = join(done, name);
		let link: string | undefined;
		try {
			link = lstatSync(here).isSymbolicLink() ? readlinkSync(here) : undefined;
		} catch {}
		if (link === undefined || ++hops > 40) {
			done = here;
			continue;
		}
		if (isAbsolute(link)) done = "/";
		pending.push(...link.split("/").reverse());
	}
	return done;
}

/** Why the json mode's file tools may not touch `path` (undefined: they may). */
function keptOutLocally(path: string): string | undefined {
	const trees = [...KERNEL_TREES];
	if (GATE_DIR) trees.push(dirname(dirname(GATE_DIR))); // the bridge's state dir (modes/<bridge>)
	const agentDir = process.env.PI_CODING_AGENT_DIR || join(homedir(), ".pi", "agent");
	trees.push(join(agentDir, "auth.json"), join(homedir(), ".pi", "agent", "auth.json"));
	const real = followed(path);
	const hit = trees.find((tree) => real === tree || real.startsWith(tree + sep));
	return hit ? `refused: ${path} is hidden from the agent's tools` : undefined;
}

/** The path pi's file tools use for the model's `path` (pi's resolveToCwd). */
function toolPath(path: string, cwd: string): string {
	let normalized = path.replace(/[\u00a0\u2000-\u200a\u202f\u205f\u3000]/g, " ").replace(/^@/, "");
	if (normalized === "~") normalized = homedir();
	else if (normalized.startsWith("~/")) normalized = join(homedir(), normalized.slice(2));
	else if (/^file:\/\//.test(normalized)) {
		try {
			normalized = fileURLToPath(normalized);
		} catch {}
	}
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
	const target = toolPath(path, ctx.cwd ?? process.cwd());
	if (keptOutLocally(target)) return; // never read what the tools keep out, not even for a diff
	const content = contentOf(target);
	if (content === undefined) return;
	ctx.ui.setStatus(ORIGINAL_KEY, JSON.stringify({ toolCallId: event.toolCallId, ...content }));
}

/** Ask the bridge about one tool call; anything but an allow blocks it. */
async function ask(ctx: any, event: any) {
	const path = event.input?.path;
	const resolvedPath =
		typeof path === "string" && path ? toolPath(path, ctx.cwd ?? process.cwd())
		: FILE_TOOLS.has(event.toolName) && event.toolName !== "write" && event.toolName !== "edit" ? toolPath(".", ctx.cwd ?? process.cwd())
		: undefined;
	const payload = JSON.stringify({
		toolCallId: event.toolCallId,
		toolName: event.toolName,
		input: event.input,
		...(resolvedPath ? { resolvedPath } : {}),
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
