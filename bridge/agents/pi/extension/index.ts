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
 */

import { readFileSync } from "node:fs";
import { join } from "node:path";

const MARKER = "pi-bridge:permission";
const GATE_DIR = process.env.PI_BRIDGE_GATE_DIR;
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

export default function (pi: any) {
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
