/**
 * The chat's conversations, without the `vscode` module: the one the view shows, and a new one in
 * its place when the user starts or opens another (pi: New Conversation, Open Conversation…).
 */
import { Conversation, type ConversationHost } from './conversation';

export class Conversations {
  /** The conversation the view shows. */
  current: Conversation;

  constructor(private readonly host: ConversationHost) {
    this.current = this.create();
  }

  private create(): Conversation {
    return new Conversation({
      session: () => this.host.session(),
      runParams: (prompt, runId) => this.host.runParams(prompt, runId),
      post: (message) => this.host.post(message),
      onUsage: (usage) => this.host.onUsage?.(usage),
      log: (message) => this.host.log?.(message),
    });
  }

  /** Show a new, empty conversation instead of the current one. */
  replace(): Conversation {
    this.current = this.create();
    this.host.onUsage?.(this.current.lastUsage);
    return this.current;
  }
}
