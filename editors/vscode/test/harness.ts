/**
 * Test harness: starts the real bridge (python -m bridge --scripted-model, real pi) on stdio behind a
 * vscode-jsonrpc connection, collects its pi/message notifications, and waits on them with timeouts.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { delimiter, resolve } from 'node:path';
import assert from 'node:assert/strict';
import {
  createMessageConnection,
  type CancellationToken,
  StreamMessageReader,
  StreamMessageWriter,
  type MessageConnection,
} from 'vscode-jsonrpc/node';
import {
  isPiMessage,
  Methods,
  type InitializationOptions,
  type PiMessage,
  type SandboxAvailability,
} from '../src/bridge/protocol';
import type { RpcConnection } from '../src/bridge/session';

export const repoRoot = resolve(__dirname, '../../../..');

/** The Python that runs the bridge: $PI_BRIDGE_PYTHON, else the repo's venv. */
export function bridgePython(): string {
  return process.env['PI_BRIDGE_PYTHON'] ?? resolve(repoRoot, '.venv/bin/python');
}

/** PATH with the repo's Node 22 + pi first, as the bridge needs to run the real pi. */
export function bridgePath(): string {
  const tools = resolve(repoRoot, '.tools/node_modules/.bin');
  const path = process.env['PATH'] ?? '';
  return existsSync(tools) ? `${tools}${delimiter}${path}` : path;
}

/** Resolve with `promise`, or reject after `ms` naming what was awaited. */
export function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Poll `condition` every 20 ms until it holds, for state that has no event (e.g. /proc). */
export async function waitUntil(condition: () => boolean, ms: number, what: string): Promise<void> {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    }
    await new Promise((resolveTick) => setTimeout(resolveTick, 20));
  }
}

interface Waiter {
  predicate: (m: PiMessage) => boolean;
  resolve: (m: PiMessage) => void;
}

/** Every pi/message received, and waits for one that matches. */
export class Messages {
  readonly all: PiMessage[] = [];
  private waiters: Waiter[] = [];

  push(m: PiMessage): void {
    this.all.push(m);
    const matched = this.waiters.filter((w) => w.predicate(m));
    this.waiters = this.waiters.filter((w) => !matched.includes(w));
    for (const w of matched) {
      w.resolve(m);
    }
  }

  of(runId: string): PiMessage[] {
    return this.all.filter((m) => m.runId === runId);
  }

  /** The first message (already received or still to come) that matches, within `ms`. */
  waitFor(predicate: (m: PiMessage) => boolean, ms: number, what: string): Promise<PiMessage> {
    const seen = this.all.find(predicate);
    if (seen) {
      return Promise.resolve(seen);
    }
    return withTimeout(
      new Promise<PiMessage>((resolve) => this.waiters.push({ predicate, resolve })),
      ms,
      what,
    );
  }
}

export interface Bridge {
  proc: ChildProcess;
  connection: MessageConnection;
  /**
   * The connection for a Session: vscode-jsonrpc keeps ONE handler per notification method, so
   * this fans pi/message out to every subscriber (the harness's own collector included).
   */
  rpc: RpcConnection;
  messages: Messages;
  stderr: () => string;
  initializeResult: {
    serverInfo?: { name: string; version?: string };
    capabilities: {
      experimental?: {
        piBridge?: { protocolVersion: number; methods?: string[]; sandbox?: SandboxAvailability | null };
      };
    };
  };
  /** LSP shutdown + exit; resolves with the bridge's exit code. */
  close(): Promise<number | null>;
}

/**
 * An environment variable every process started by this test run inherits (bridge, pi, the tools
 * pi runs), so a leftover process can be told apart from those of other programs on the machine.
 */
export const TEST_TAG_VAR = 'PI_BRIDGE_TEST_VSCODE_TAG';
export const testTag = `vscode-test-${process.pid}-${Date.now().toString(36)}`;

/** The fake pi of the Python tests (tests/fakes/fake_pi.py): faults real pi cannot be made to show. */
export function fakePiCommand(): [string, ...string[]] {
  return [bridgePython(), resolve(repoRoot, 'tests/fakes/fake_pi.py')];
}

export interface BridgeOptions {
  /** Run the real pi against the bridge's scripted model (default), or pi as initializationOptions say. */
  scriptedModel?: boolean;
  initializationOptions?: InitializationOptions;
}

export async function startBridge(options: BridgeOptions = {}): Promise<Bridge> {
  const args = ['-m', 'bridge', ...(options.scriptedModel === false ? [] : ['--scripted-model'])];
  const proc = spawn(bridgePython(), args, {
    cwd: repoRoot,
    env: { ...process.env, PATH: bridgePath(), [TEST_TAG_VAR]: testTag },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stderr = '';
  proc.stderr?.setEncoding('utf8');
  proc.stderr?.on('data', (chunk: string) => {
    stderr += chunk;
  });
  const exited = new Promise<number | null>((resolveExit) => proc.on('exit', (code) => resolveExit(code)));
  const connection = createMessageConnection(
    new StreamMessageReader(proc.stdout),
    new StreamMessageWriter(proc.stdin),
  );
  const messages = new Messages();
  const subscribers = new Set<(params: unknown) => void>();
  connection.onNotification(Methods.message, (params: unknown) => {
    if (isPiMessage(params)) {
      messages.push(params);
    }
    for (const subscriber of subscribers) {
      subscriber(params);
    }
  });
  const rpc: RpcConnection = {
    sendRequest: <R>(method: string, param: unknown, token?: CancellationToken) =>
      token ? connection.sendRequest<R>(method, param, token) : connection.sendRequest<R>(method, param),
    onNotification: (method: string, handler: (params: unknown) => void) => {
      assert.equal(method, Methods.message, 'only pi/message is fanned out');
      subscribers.add(handler);
      return { dispose: () => subscribers.delete(handler) };
    },
  };
  connection.listen();
  const initializeResult = await withTimeout(
    connection.sendRequest<Bridge['initializeResult']>('initialize', {
      processId: process.pid,
      rootUri: null,
      capabilities: {},
      workspaceFolders: null,
      initializationOptions: options.initializationOptions ?? {},
    }),
    30_000,
    `initialize (bridge stderr so far: ${stderr})`,
  );
  await connection.sendNotification('initialized', {});
  return {
    proc,
    connection,
    rpc,
    messages,
    stderr: () => stderr,
    initializeResult,
    async close() {
      if (proc.exitCode !== null) {
        return proc.exitCode;
      }
      await withTimeout(connection.sendRequest('shutdown'), 20_000, 'shutdown');
      await connection.sendNotification('exit');
      const code = await withTimeout(exited, 10_000, 'bridge exit');
      connection.dispose();
      return code;
    },
  };
}

/** True while `pid` names a live (non-zombie) process. */
export function isAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    return state !== 'Z' && state !== 'X';
  } catch {
    return false;
  }
}

/**
 * Pids of live processes whose argv (joined by spaces) matches `pattern` and whose environment
 * holds `${TEST_TAG_VAR}=${tag}` (only processes of this test run, whoever their parent is now).
 */
export function processesMatching(pattern: RegExp, tag: string = testTag): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) {
      continue;
    }
    try {
      const argv = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0').filter(Boolean).join(' ');
      if (!pattern.test(argv) || !isAlive(Number(entry))) {
        continue;
      }
      const environ = readFileSync(`/proc/${entry}/environ`, 'utf8').split('\0');
      if (environ.includes(`${TEST_TAG_VAR}=${tag}`)) {
        pids.push(Number(entry));
      }
    } catch {
      // The process ended while we looked.
    }
  }
  return pids;
}

/** Pids of every live descendant of `root`. */
export function descendants(root: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) {
      continue;
    }
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      const list = children.get(ppid) ?? [];
      list.push(Number(entry));
      children.set(ppid, list);
    } catch {
      // The process ended while we looked.
    }
  }
  const out: number[] = [];
  const stack = [...(children.get(root) ?? [])];
  while (stack.length > 0) {
    const pid = stack.pop()!;
    if (isAlive(pid)) {
      out.push(pid);
    }
    stack.push(...(children.get(pid) ?? []));
  }
  return out;
}
