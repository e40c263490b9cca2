/**
 * What a reply to a `send()` caller carries: published on the caller's reply channel and stored under
 * the task's result key, as JSON.
 */
export interface ReplyMessage {
  readonly id: string;
  readonly response?: unknown;
  readonly err?: unknown;
}
