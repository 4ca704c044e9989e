/**
 * The chat's conversations, without the `vscode` module: the one the view shows, a new one in its
 * place when the user starts or opens another (pi: New Conversation, Open Conversation…, a
 * one-shot pi: Ask…), and the replaced ones whose run still goes. Only the shown conversation
 * reaches the view; a replaced one runs on unseen until it ends, and opening its session again
 * shows it live. A run of any of them can be stopped (pi: Cancel Current Run).
 */
import type { CancellationToken } from 'vscode-jsonrpc';
import { Conversation, type ConversationHost } from './conversation';
import type { RequestPermissionAnswer, RequestPermissionParams } from '../../bridge/protocol';

export class Conversations {
  /** The conversation the view shows. */
  current: Conversation;
  /** Replaced conversations whose run still goes. */
  private readonly unseen = new Set<Conversation>();
  /** Conversations whose turn runs, the one whose turn started last at the end. */
  private readonly running: Conversation[] = [];

  constructor(private readonly host: ConversationHost) {
    this.current = this.create();
  }

  private create(): Conversation {
    const conversation: Conversation = new Conversation({
      session: () => this.host.session(),
      runParams: (prompt, runId) => this.host.runParams(prompt, runId),
      // A conversation the view no longer shows must not touch it (its input state, its turns).
      post: (message) => (this.current === conversation ? this.host.post(message) : undefined),
      onChange: () => this.changed(conversation),
      onApprovals: () => this.host.onApprovals?.(),
      defaultMode: () => this.host.defaultMode?.() ?? 'ask',
      cwd: () => this.host.cwd?.(),
      defaultAgent: () => this.host.defaultAgent?.() ?? null,
      onTitle: () => (this.current === conversation ? this.host.onTitle?.() : undefined),
      log: (message) => this.host.log?.(message),
      memory: this.host.memory,
    });
    return conversation;
  }

  private changed(conversation: Conversation): void {
    // A turn that starts goes last; a change while it runs (its usage, its mode) keeps its place.
    const at = this.running.indexOf(conversation);
    if (conversation.running) {
      if (at < 0) {
        this.running.push(conversation);
      }
      this.host.onChange?.();
      return;
    }
    if (at >= 0) {
      this.running.splice(at, 1);
    }
    if (conversation !== this.current) {
      this.unseen.delete(conversation);
    }
    this.host.onChange?.();
  }

  /**
   * A tool call asks the user (pi/requestPermission): the conversation whose turn is that run
   * shows the card (a conversation running unseen shows it when opened again).
   */
  requestPermission(params: RequestPermissionParams, token?: CancellationToken): Promise<RequestPermissionAnswer> {
    const conversation = this.running.find((c) => c.runId === params.runId);
    if (!conversation) {
      this.host.log?.(`pi/requestPermission for run ${params.runId}, which no conversation runs: cancelled`);
      return Promise.resolve({ outcome: 'cancelled' });
    }
    return conversation.requestPermission(params, token);
  }

  /** Tool calls waiting for the user, in every conversation (the view's badge). */
  get pendingApprovals(): number {
    return [this.current, ...this.unseen].reduce((n, c) => n + c.pendingApprovals, 0);
  }

  /** How many runs go, in all conversations (shown or not). */
  get runningCount(): number {
    return this.running.length;
  }

  /** Stop the run that started last, in whichever conversation; false when none goes. */
  stopNewest(): boolean {
    const newest = this.running[this.running.length - 1];
    void newest?.stop();
    return newest !== undefined;
  }

  private show(conversation: Conversation): Conversation {
    if (this.current !== conversation && this.current.running) {
      this.unseen.add(this.current);
    }
    this.unseen.delete(conversation);
    this.current = conversation;
    this.host.onChange?.();
    return conversation;
  }

  /** The conversation (shown, or running unseen) of pi session `sessionId`. */
  find(sessionId: string): Conversation | undefined {
    return [this.current, ...this.unseen].find((c) => c.sessionId === sessionId);
  }

  /**
   * Session `sessionId` was deleted: a conversation of it that is shown gives way to a new one,
   * one running unseen is forgotten (the bridge closed its agent).
   */
  forget(sessionId: string): void {
    for (const conversation of this.unseen) {
      if (conversation.sessionId === sessionId) {
        this.unseen.delete(conversation);
      }
    }
    if (this.current.sessionId === sessionId) {
      this.replace().replay();
    }
  }

  /** Show a new, empty conversation instead of the current one. */
  replace(): Conversation {
    return this.show(this.create());
  }

  /**
   * The conversation a one-shot prompt starts, shown: a new one, as a one-shot run has no earlier
   * turns (the current one when it has none either). The context chips waiting in the view go
   * with it.
   */
  forOneShot(): Conversation {
    if (this.current.isEmpty) {
      return this.current;
    }
    const previous = this.current;
    const next = this.replace();
    previous.moveChips(next);
    return next;
  }

  /**
   * Show the conversation of pi session `sessionId`: the live one if it is shown or runs unseen,
   * else a new one with its history from pi/session. False when the bridge does not know it.
   */
  async open(sessionId: string): Promise<boolean> {
    const live = [this.current, ...this.unseen].find((c) => c.sessionId === sessionId);
    if (live) {
      this.show(live).replay();
      return true;
    }
    return this.replace().open(sessionId);
  }
}
