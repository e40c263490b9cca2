import { ackCoalescerOf } from './ack-coalescer.js';
import type { TaskEnvelope } from './codec.js';
import { toErrorRecord, type DeadLetterReason, type DeadLetterRecord, type ErrorRecord } from './dead-letter.js';
import type { QueueKeys } from './keys.js';
import { MAX_RAW_IN_DEAD_LETTER } from './rules.js';
import type { TaskRedis } from './scripts.js';

export interface SettleOptions {
  readonly workerId: string;
  readonly deadLetterCap: number;
  readonly resultTtlMs: number;
}

/** At most MAX_RAW_IN_DEAD_LETTER characters of an undecodable entry, saying how much was left out. */
export function capRaw(raw: string): string {
  return raw.length > MAX_RAW_IN_DEAD_LETTER ? `${raw.slice(0, MAX_RAW_IN_DEAD_LETTER)}… (${raw.length - MAX_RAW_IN_DEAD_LETTER} more characters not kept)` : raw;
}

/** What a reply to a `send()` caller carries (published and stored as JSON). */
export interface ReplyMessage {
  readonly id: string;
  readonly response?: unknown;
  readonly err?: unknown;
}

/**
 * A task this worker holds under a fencing token: the unit of work. Each way of settling it is one
 * fenced script call; `false` means the worker no longer holds the task (its lease was lost), so
 * nothing was changed and the task is someone else's now.
 */
export class ClaimedTask {
  constructor(
    private readonly redis: TaskRedis,
    readonly keys: QueueKeys,
    readonly token: string,
    readonly raw: string,
    private readonly options: SettleOptions,
  ) {}

  get processingKey(): string {
    return this.keys.processing(this.options.workerId);
  }

  /**
   * Success: the task leaves Redis; a `send()` caller gets `reply` (the reply message, already JSON).
   * Acknowledgements made in one event-loop turn share one script call (each fenced on its own token).
   */
  acknowledge(envelope: TaskEnvelope, reply?: string): Promise<boolean> {
    const replies = envelope.replyTo !== undefined && reply !== undefined;
    return ackCoalescerOf(this.redis).acknowledge(this.keys, this.processingKey, [
      this.token,
      envelope.id,
      envelope.dedupKey ?? '',
      replies ? (envelope.replyTo as string) : '',
      replies ? reply : '',
      this.options.resultTtlMs,
    ]);
  }

  /**
   * Schedules the next attempt after `delayMs` (Redis clock), with this attempt counted. Resolves
   * with the due time, or `undefined` when the task is no longer held.
   */
  async retry(delayMs: number): Promise<number | undefined> {
    const due = await this.redis.retryTask(this.processingKey, this.keys.delayed, ...this.settleKeys, this.token, delayMs);
    return due === 0 ? undefined : due;
  }

  /** Moves the task to dead letters; a `send()` caller gets `replyError`. */
  async deadLetter(
    details: {
      reason: DeadLetterReason;
      attempts: number;
      envelope?: TaskEnvelope;
      detail?: string;
      error?: ErrorRecord;
      replyError?: unknown;
    },
  ): Promise<boolean> {
    const { envelope } = details;
    const record: DeadLetterRecord = {
      id: envelope?.id,
      pattern: this.keys.queue,
      clientId: envelope?.clientId,
      reason: details.reason,
      detail: details.detail,
      error: details.error,
      attempts: details.attempts,
      enqueuedAt: envelope?.enqueuedAt,
      deadAt: Date.now(),
      workerId: this.options.workerId,
      // An undecodable entry is kept for inspection, but only so much of it: a 20 MB garbage entry is not.
      ...(envelope ? { payload: envelope.payload } : { raw: capRaw(this.raw) }),
      ...(envelope?.priority ? { priority: envelope.priority } : {}),
    };
    const reply =
      envelope?.replyTo !== undefined
        ? this.replyArgs(envelope, { id: envelope.id, err: details.replyError ?? details.error })
        : [];
    const settled = await this.redis.deadLetterTask(
      this.processingKey,
      this.keys.deadLetters,
      this.keys.result(envelope?.id ?? 'unknown'),
      this.dedupKey(envelope),
      ...this.settleKeys,
      this.token,
      JSON.stringify(record),
      this.options.deadLetterCap,
      envelope?.dedupKey === undefined ? '' : envelope.id,
      ...reply,
    );
    return settled === 1;
  }

  /** The keys every settle script ends with: those releasing the task's per-client cap slot, and the outcome counters. */
  private get settleKeys(): [counted: string, inflight: string, parked: string, ring: string, counters: string] {
    return [this.keys.counted, this.keys.inflight, this.keys.parked, this.keys.ring, this.keys.counters];
  }

  /** The task's deduplication key, or a key of its queue the script leaves alone when it has none. */
  private dedupKey(envelope: TaskEnvelope | undefined): string {
    return envelope?.dedupKey === undefined ? this.keys.ring : this.keys.dedup(envelope.dedupKey);
  }

  /** An error reply: what the filter produced, or, when that cannot be JSON, the safe error record. */
  private replyArgs(envelope: TaskEnvelope, message: ReplyMessage): (string | number)[] {
    let json: string;
    try {
      json = JSON.stringify(message);
    } catch (error) {
      json = JSON.stringify({ id: message.id, err: toErrorRecord(message.err ?? error) });
    }
    return [envelope.replyTo as string, json, this.options.resultTtlMs];
  }
}
