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
 */

import { readFileSync } from "node:fs";
import { join } from "node:path";

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

export default function (pi: any) {
	const failed = registerMcpServers(pi);
	if (failed.length) {
		pi.on("session_start", async (_event: any, ctx: any) => {
			ctx.ui?.notify?.(failed.join("\n"), "error");
		});
	}
	if (!GATE_DIR) return;
	pi.on("tool_call", async (event: any, ctx: any) => {
		if (!ctx.hasUI) return undefined;
		if (modeOf(ctx.sessionManager?.getSessionId?.()) === "full") return undefined;
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
	});
}
