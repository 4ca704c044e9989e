/**
 * pi-bridge's optional plan tool: pi has none, so with `$PI_BRIDGE_PLAN_TOOL=1` (the client's
 * `planTool` option) the model gets a `todo` tool, modelled on pi's own
 * examples/extensions/todo.ts, plus `start` (the todo being worked on). Its list lives in each
 * result's `details` (`{action, todos: [{id, text, done, doing}], nextId}`), so a branch or a resumed session finds the list of its own point
 * in history; the bridge's pi mapper turns each result's `todos` into the contract's `plan`.
 * It touches nothing outside pi's memory, so the gate does not ask about it (index.ts).
 */

export const PLAN_TOOL = process.env.PI_BRIDGE_PLAN_TOOL === "1";
export const TODO_TOOL = "todo";

type Todo = { id: number; text: string; done: boolean; doing?: boolean };
type Details = { action: string; todos: Todo[]; nextId: number; error?: string };

const PARAMETERS = {
	type: "object",
	properties: {
		action: { type: "string", enum: ["list", "add", "start", "toggle", "clear"] },
		text: { type: "string", description: "Todo text (for add)" },
		id: { type: "number", description: "Todo ID (for start and toggle)" },
	},
	required: ["action"],
};

/** Register the `todo` tool (only when the client turned the plan tool on). */
export function registerTodo(pi: any) {
	if (!PLAN_TOOL) return;
	let todos: Todo[] = [];
	let nextId = 1;
	const reconstruct = (ctx: any) => {
		todos = [];
		nextId = 1;
		for (const entry of ctx?.sessionManager?.getBranch?.() ?? []) {
			const msg = entry?.type === "message" ? entry.message : undefined;
			if (msg?.role !== "toolResult" || msg.toolName !== TODO_TOOL) continue;
			const details = msg.details as Details | undefined;
			if (details && Array.isArray(details.todos)) {
				todos = details.todos.map((t) => ({ ...t }));
				nextId = details.nextId;
			}
		}
	};
	pi.on("session_start", async (_event: any, ctx: any) => reconstruct(ctx));
	pi.on("session_tree", async (_event: any, ctx: any) => reconstruct(ctx));
	const result = (action: string, text: string, error?: string) => ({
		content: [{ type: "text", text }],
		details: { action, todos: todos.map((t) => ({ ...t })), nextId, ...(error ? { error } : {}) } as Details,
	});
	pi.registerTool({
		name: TODO_TOOL,
		label: "Todo",
		description: "Manage a todo list (your plan, shown to the user). Actions: list, add (text), start (id: the todo you work on now), toggle (id: done or not), clear",
		parameters: PARAMETERS,
		async execute(_id: string, params: any) {
			switch (params?.action) {
				case "list":
					return result("list", todos.length ? todos.map((t) => `[${t.done ? "x" : t.doing ? ">" : " "}] #${t.id}: ${t.text}`).join("\n") : "No todos");
				case "add": {
					if (typeof params.text !== "string" || !params.text) return result("add", "Error: text required for add", "text required");
					const todo = { id: nextId++, text: params.text, done: false };
					todos.push(todo);
					return result("add", `Added todo #${todo.id}: ${todo.text}`);
				}
				case "start": {
					const todo = todos.find((t) => t.id === params.id);
					if (!todo) return result("start", `Todo #${params.id} not found`, `#${params.id} not found`);
					for (const other of todos) other.doing = false;
					todo.doing = true;
					todo.done = false;
					return result("start", `Started todo #${todo.id}: ${todo.text}`);
				}
				case "toggle": {
					const todo = todos.find((t) => t.id === params.id);
					if (!todo) return result("toggle", `Todo #${params.id} not found`, `#${params.id} not found`);
					todo.done = !todo.done;
					todo.doing = false;
					return result("toggle", `Todo #${todo.id} ${todo.done ? "completed" : "uncompleted"}`);
				}
				case "clear": {
					const count = todos.length;
					todos = [];
					nextId = 1;
					return result("clear", `Cleared ${count} todos`);
				}
				default:
					return result("list", `Unknown action: ${params?.action}`, `unknown action: ${params?.action}`);
			}
		},
	});
}
