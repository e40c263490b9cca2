import type { CoalesceSettings } from './coalesce.js';

/**
 * A task checked and encoded as Redis will store it (`entry`, see codec.ts), with what the enqueue script
 * needs beside the entry: where it goes (client, priority, delay) and what guards it (deduplication).
 * Made by the producer (`prepareTask`), encoded into script arguments by the gateway alone.
 */
export interface PreparedTask {
  readonly id: string;
  readonly clientId: string;
  /** The stored form: `<attempts>|<envelope JSON>`. */
  readonly entry: string;
  /** Higher runs first within its client; 0 is the plain FIFO list. */
  readonly priority: number;
  /** Claimable this many ms after the enqueue (Redis clock); 0 at once. */
  readonly delayMs: number;
  readonly deduplicationKey?: string;
  readonly deduplicationTtlMs: number;
  /** A send() task: kept until its reply comes, so its caller can cancel it. */
  readonly awaitsReply: boolean;
  /** Tracked: its index is kept `keepMs` after it ended, `liveMs` while it waits or runs. */
  readonly track?: TrackTimes;
  /** A send() caller's reply channel (stored on a tracked task's index, so a cancel can answer it). */
  readonly replyTo?: string;
  /** Latest wins: its coalescing key and how emits with it combine. */
  readonly coalesce?: CoalesceSettings;
  /**
   * Its payload out of line: the body id its entry names and the payload's JSON, stored by the producer
   * (`QueueKeys.body`) before the enqueue call (see scripts/include/body.lua).
   */
  readonly body?: { readonly id: string; readonly json: string };
}

/** How long a tracked task's index is kept (ms): once the task ended, and while it waits or runs. */
export interface TrackTimes {
  readonly keepMs: number;
  readonly liveMs: number;
}

/**
 * One success to settle with `ackTasks` (a task that cannot ride on a claim call): its fencing token, the
 * task, the deduplication key it frees, and for a `send()` task the reply to store and publish.
 */
export interface AckItem {
  readonly token: string;
  readonly taskId: string;
  readonly deduplicationKey?: string;
  /** A `send()` task's reply: the caller's channel and the message (JSON), stored for `resultTtlMs`. */
  readonly reply?: { readonly channel: string; readonly message: string };
  readonly resultTtlMs: number;
  /** A tracked task's keys (`QueueKeys.tracked`): its index becomes `completed`. */
  readonly tracked?: { readonly index: string; readonly entry: string };
}
