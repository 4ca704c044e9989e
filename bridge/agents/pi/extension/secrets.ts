/**
 * pi-bridge's secrets, on pi's side: no key value reaches the model through a tool, and pi's bash
 * tool runs without the keys.
 *
 * - `registerSecrets(pi)`: a `tool_result` handler masks every known secret value in each tool's
 *   result (its text content, details and structured content) before pi records it or sends it to
 *   the model. It is the same last line the bridge draws over every frame it sends its client
 *   (bridge/policy/redact.py); the first line is keeping the reads out (the sandbox, the read tools'
 *   path policy).
 * - `scrubbedEnv(env)`: the environment the bash tool's `spawnHook` gives a command, sandboxed or
 *   not: without the secret-named variables (as bridge/policy/sandbox.py SECRET_VAR, though one
 *   whose value is an absolute path, such as SSH_AUTH_SOCK, is no key and stays), without the
 *   bridge's own `PI_BRIDGE_*`, and without the client's variables the bridge names in
 *   `$PI_BRIDGE_DROPPED_VARS`.
 *
 * The values known are those this process holds already, never handed on anew: its environment
 * (secret-named variables, the client's variables named in `$PI_BRIDGE_MASKED_VARS`, URL
 * passwords), pi's auth.json and Claude Code's credentials (their secret-keyed leaves, read again
 * when a file changes), and the MCP servers' env and header values from `$PI_BRIDGE_MCP_CONFIG`.
 * What is masked is the value as it is: a value the model has a command transform (base64, cut
 * in pieces) is not recognised here.
 */

import { readFileSync, statSync } from "node:fs";
import { homedir } from "node:os";
import { isAbsolute, join } from "node:path";

const MASK = "[redacted]";
// Shorter values are never secrets (bridge/policy/redact.py MIN_SECRET_LENGTH): masking `1` or
// `true` everywhere would garble every result and protect nothing.
const MIN_SECRET_LENGTH = 8;
// A variable whose value is a secret (bridge/policy/redact.py _SECRET_NAME).
const SECRET_NAME = /KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH(?!OR)|COOKIE/i;
// A variable a command does not get (bridge/policy/sandbox.py SECRET_VAR, GIT_AUTHOR_* kept).
const SECRET_VAR = /KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH(?!OR)|COOKIE|^AWS_/i;
// Keys of an auth file's JSON whose string leaves are secrets (redact.py _SECRET_LEAF).
const SECRET_LEAF = /key|token|secret|passw|credential|access|refresh|cookie/i;

function namesIn(variable: string): Set<string> {
	return new Set((process.env[variable] ?? "").split(",").filter(Boolean));
}

const MASKED = namesIn("PI_BRIDGE_MASKED_VARS");
const DROPPED = namesIn("PI_BRIDGE_DROPPED_VARS");
const RUN_TOKEN = "PI_BRIDGE_RUN_TOKEN";
const TAG_PREFIX = "PI_BRIDGE_TEST_";

/** The environment a command of the bash tool gets: `env` without keys (see the top). */
export function scrubbedEnv(env: Record<string, string | undefined>): Record<string, string> {
	const kept: Record<string, string> = {};
	for (const [name, value] of Object.entries(env)) {
		// The run's token and a launcher's tags name no file and hold no secret: they are how the
		// bridge (and a test) finds the run's processes.
		const tag = name === RUN_TOKEN || name.startsWith(TAG_PREFIX);
		if (value === undefined || (name.startsWith("PI_BRIDGE_") && !tag) || DROPPED.has(name)) continue;
		if (!tag && SECRET_VAR.test(name) && !(isAbsolute(value) && !value.includes("\n"))) continue;
		kept[name] = value;
	}
	return kept;
}

function urlPassword(value: string): string | undefined {
	if (!value.includes("://") || !value.includes("@")) return undefined;
	try {
		return decodeURIComponent(new URL(value).password) || undefined;
	} catch {
		return undefined;
	}
}

/** The secret values of pi's own environment (fixed for the life of the process). */
function envSecrets(): string[] {
	const found: string[] = [];
	for (const [name, value] of Object.entries(process.env)) {
		if (!value) continue;
		if (SECRET_NAME.test(name) || MASKED.has(name)) found.push(value);
		const password = urlPassword(value);
		if (password) found.push(password);
	}
	return found;
}

const ENV_SECRETS = envSecrets();

function leaves(node: unknown, secret: boolean, found: string[]): void {
	if (typeof node === "string") {
		if (secret) found.push(node);
	} else if (Array.isArray(node)) {
		for (const value of node) leaves(value, secret, found);
	} else if (node && typeof node === "object") {
		for (const [key, value] of Object.entries(node)) leaves(value, secret || SECRET_LEAF.test(key), found);
	}
}

/** MCP env and header values, and a header's credential after its scheme (`Bearer <token>`). */
function mcpSecrets(config: any): string[] {
	const found: string[] = [];
	for (const server of Object.values<any>(config?.mcpServers ?? {})) {
		for (const group of [server?.env, server?.headers]) {
			for (const value of Object.values<unknown>(group ?? {})) {
				if (typeof value !== "string") continue;
				found.push(value);
				const [scheme, ...rest] = value.split(" ");
				if (rest.length && /^[A-Za-z]+$/.test(scheme)) found.push(rest.join(" ").trim());
			}
		}
	}
	return found;
}

type Watched = { stamp: string; values: string[] };
const watched = new Map<string, Watched>();

/** The secrets in one file, read again only when it changed (its inode, ctime or size).
 * Every tool result asks, so an absent file costs a stat and no thrown error. */
function fileSecrets(path: string, read: (text: string) => string[]): string[] {
	let stamp = "";
	try {
		const info = statSync(path, { throwIfNoEntry: false });
		if (info) stamp = `${info.ino}:${info.ctimeMs}:${info.mtimeMs}:${info.size}`;
	} catch {}
	const seen = watched.get(path);
	if (seen && seen.stamp === stamp) return seen.values;
	let values: string[] = [];
	if (stamp) {
		try {
			values = read(readFileSync(path, "utf8"));
		} catch {
			values = [];
		}
	}
	watched.set(path, { stamp, values });
	return values;
}

function authLeaves(text: string): string[] {
	const found: string[] = [];
	try {
		leaves(JSON.parse(text), false, found);
	} catch {
		return text.split(/[\s=:"',]+/);
	}
	return found;
}

function secretFiles(): Array<[string, (text: string) => string[]]> {
	const home = process.env.HOME || homedir();
	const piDefault = join(home, ".pi", "agent");
	const claudeDir = process.env.CLAUDE_CONFIG_DIR || join(home, ".claude");
	const files: Array<[string, (text: string) => string[]]> = [
		[join(process.env.PI_CODING_AGENT_DIR || piDefault, "auth.json"), authLeaves],
		[join(piDefault, "auth.json"), authLeaves],
		[join(claudeDir, ".credentials.json"), authLeaves],
		[join(home, ".claude.json"), authLeaves],
	];
	const mcp = process.env.PI_BRIDGE_MCP_CONFIG;
	if (mcp) files.push([mcp, (text) => mcpSecrets(JSON.parse(text))]);
	return files;
}

/** Every secret value known now, longest first (so one that holds another is masked whole). */
export function secretValues(): string[] {
	const all = new Set<string>(ENV_SECRETS);
	for (const [path, read] of secretFiles()) for (const value of fileSecrets(path, read)) all.add(value);
	return [...all].filter((value) => value.length >= MIN_SECRET_LENGTH).sort((a, b) => b.length - a.length);
}

/** `text` with every one of `values` masked. */
export function maskText(text: string, values: string[]): string {
	let masked = text;
	for (const value of values) if (masked.includes(value)) masked = masked.split(value).join(MASK);
	return masked;
}

/** Any JSON-like value with every string in it masked (the same object when nothing changed). */
function masked<T>(node: T, values: string[]): T {
	if (typeof node === "string") return maskText(node, values) as T;
	if (Array.isArray(node)) {
		const items = node.map((item) => masked(item, values));
		return (items.some((item, i) => item !== node[i]) ? items : node) as T;
	}
	if (node && typeof node === "object") {
		let changed = false;
		const copy: Record<string, unknown> = {};
		for (const [key, value] of Object.entries(node)) {
			copy[key] = masked(value, values);
			changed ||= copy[key] !== value;
		}
		return (changed ? copy : node) as T;
	}
	return node;
}

/** Mask every known secret in each tool result before pi records it or the model sees it. */
export function registerSecrets(pi: any) {
	// Read the files once as pi starts (a spare boots before any prompt): the first tool result,
	// a cancel's among them, then finds them stamped and its code paths warm.
	secretValues();
	pi.on("tool_result", async (event: any) => {
		const values = secretValues();
		if (!values.length) return undefined;
		const content = masked(event.content, values);
		const details = masked(event.details, values);
		const structured = masked(event.structuredContent, values);
		if (content === event.content && details === event.details && structured === event.structuredContent)
			return undefined;
		return {
			content,
			details,
			...(event.structuredContent === undefined ? {} : { structuredContent: structured }),
		};
	});
}
