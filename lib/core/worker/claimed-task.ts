import type { DecodedEntry, TaskEnvelope } from '../model/codec.js';
import {
  capRaw,
  capText,
  toErrorRecord,
  type DeadLetterReason,
  type DeadLetterRecord,
  type ErrorRecord,
} from '../model/dead-letter.js';
import type { QueueKeys, TrackedKeys } from '../redis/keys.js';
import type { ClaimedTaskCalls } from '../redis/gateway.js';
import type { SettleOptions } from '../redis/requeue.js';
import type { TurnBatches } from './turn-batch.js';
import type { CoalescedStart } from '../redis/track-gateway.js';
import { hasTrait } from '../model/task-traits.js';
import type { ReplyError, ReplyMessage } from '../model/reply.js';

export type { SettleOptions };

/**
 * A task this worker holds under a fencing token: the unit of work. Each way of failing it (retry,
 * dead letter) is one fenced script call; `false` means the worker no longer holds the task (its lease
 * was lost), so nothing was changed and the task is someone else's now. Successes go through the
 * worker's `Completer`.
 */
export class ClaimedTask {
  constructor(
    /** The connection's gateway (looked up once per worker, not per task). */
    private readonly gateway: ClaimedTaskCalls,
    readonly keys: QueueKeys,
    readonly token: string,
    readonly raw: string,
    private readonly options: SettleOptions,
    /**
     * Where a tracked or coalesced task's start and an out-of-line payload's read go (one call per turn and
     * shard); without them, a start is a call of its own.
     */
    private readonly batches: TurnBatches = {},
    /** The claim recorded it running in its index (a tracked task): no startTasks call before its handler. */
    readonly startedByClaim = false,
    /** Then the keep its index holds (ms): sent back with its success, which then needs no read of the index. */
    readonly keepOfIndex?: string,
  ) {}

  /**
   * The claimed entry with its out-of-line payload (`envelope.body`) read in (one MGET per turn and shard), or
   * why it cannot run: the payload is gone, or not JSON.
   */
  async withPayload(claimed: DecodedEntry): Promise<DecodedEntry | string> {
    const bodyId = claimed.envelope.body!;
    if (!this.batches.bodies) throw new Error('this worker reads no out-of-line payloads');
    const json = await this.batches.bodies.add(this.keys, this.options.workerId, bodyId);
    try {
      const payload: unknown = json === undefined ? undefined : JSON.parse(json);
      // spread-ok: once per task with an out-of-line payload (parsing its JSON costs far more)
      if (json !== undefined) return { attempts: claimed.attempts, envelope: { ...claimed.envelope, payload } };
    } catch {
      return `its payload, stored out of line (body ${bodyId}), is not JSON`;
    }
    return `its payload, stored out of line (body ${bodyId}), is gone`;
  }

  /**
   * Schedules the next attempt after `delayMs` (Redis clock), with this attempt counted (unless `counts` says
   * a step's own retry or a yield). Resolves
   * with the due time, `undefined` when the task is no longer held, or 'replaced' when a newer task of its
   * coalescing key was emitted (it is not retried: it left the worker).
   */
  async retry(
    delayMs: number,
    envelope?: TaskEnvelope,
    counts: 'attempt' | 'step' | 'yield' = 'attempt',
  ): Promise<number | 'replaced' | undefined> {
    const retried = await this.gateway.retry(
      this.keys,
      this.options.workerId,
      this.token,
      delayMs,
      this.tracked(envelope),
      counts,
    );
    return retried.kind === 'scheduled' ? retried.dueAt : retried.kind === 'replaced' ? 'replaced' : undefined;
  }

  /** The task's durable steps (`ctx.step`): what earlier runs saved, and the fenced save. */
  get steps(): ClaimedTaskCalls['steps'] {
    return this.gateway.steps;
  }

  /** A task with a coalescing key, before its handler starts: it takes its key's newest entry (see startCoalesced-1.lua). */
  async startCoalesced(id: string): Promise<CoalescedStart> {
    const item = { token: this.token, id };
    if (this.batches.coalescedStarts) return this.batches.coalescedStarts.add(this.keys, this.options.workerId, item);
    const [started] = await this.gateway.track.startCoalesced(this.keys, this.options.workerId, [item]);
    return started;
  }

  /** A tracked task, before its handler starts: recorded running, or cancelled (a cancel came first), or lost. */
  async start(envelope: TaskEnvelope, attempt: number): Promise<'run' | 'cancelled' | 'lost'> {
    const item = { token: this.token, id: envelope.id, attempt };
    if (this.batches.starts) return this.batches.starts.add(this.keys, this.options.workerId, item);
    const [started] = await this.gateway.track.start(this.keys, this.options.workerId, [item]);
    return started;
  }

  /** Progress of the run (value already JSON): stored when tracked, published when its caller listens; false when no longer held. */
  progress(envelope: TaskEnvelope, seq: number, value: string): Promise<boolean> {
    const publish =
      envelope.progress === 1 && envelope.replyTo !== undefined
        ? {
            channel: envelope.replyTo,
            message: `{"id":${JSON.stringify(envelope.id)},"seq":${seq},"progress":${value}}`,
          }
        : undefined;
    return this.gateway.track.progress(this.keys, this.options.workerId, {
      token: this.token,
      id: hasTrait(envelope, 'tracked') ? envelope.id : undefined,
      seq,
      value,
      publish,
    });
  }

  /** The task's index and entry keys when it is tracked. */
  tracked(envelope: TaskEnvelope | undefined): TrackedKeys | undefined {
    return envelope && hasTrait(envelope, 'tracked') ? this.keys.tracked(envelope.id) : undefined;
  }

  /** Whether this worker still holds the task, renewing its lease in the shard (`leaseMs`) on the way. */
  async stillHeld(leaseMs: number): Promise<boolean> {
    const { lost } = await this.gateway.heartbeat(this.keys, this.options.workerId, leaseMs, [this.token]);
    return lost.length === 0;
  }

  /** Moves the task to dead letters; a `send()` caller gets `replyError`. */
  async deadLetter(details: {
    reason: DeadLetterReason;
    attempts: number;
    envelope?: TaskEnvelope;
    /** The id found in an entry that could not be decoded (best effort). */
    guessedId?: string;
    detail?: string;
    error?: ErrorRecord;
    /** What the `send()` caller gets (built by the runner); without one, `error` without its stack. */
    replyError?: ReplyError;
  }): Promise<boolean> {
    const { envelope } = details;
    const record: DeadLetterRecord = {
      id: envelope?.id ?? details.guessedId,
      pattern: this.keys.queue,
      clientId: envelope?.clientId,
      reason: details.reason,
      detail: details.detail === undefined ? undefined : capText(details.detail),
      error: details.error,
      attempts: details.attempts,
      enqueuedAt: envelope?.enqueuedAt,
      deadAt: Date.now(),
      workerId: this.options.workerId,
      // An undecodable entry is kept for inspection, but only so much of it: a 20 MB garbage entry is not.
      ...(envelope ? { payload: envelope.payload } : { raw: capRaw(this.raw) }),
      ...(envelope?.priority ? { priority: envelope.priority } : {}),
      ...(envelope?.track === 1 ? { track: 1 as const } : {}),
      ...(envelope?.batch !== undefined ? { batch: envelope.batch } : {}),
      ...(envelope?.flow !== undefined
        ? { flow: envelope.flow, node: envelope.node, fold: envelope.fold, parents: envelope.parents }
        : {}),
      ...(typeof envelope?.traceparent === 'string' ? { traceparent: envelope.traceparent } : {}),
      ...(typeof envelope?.tracestate === 'string' ? { tracestate: envelope.tracestate } : {}),
    };
    return this.gateway.deadLetter(this.keys, this.options.workerId, this.token, {
      record: JSON.stringify(record),
      cap: this.options.deadLetterCap,
      taskId: envelope?.id,
      deduplicationKey: envelope?.dedupKey,
      tracked: this.tracked(envelope),
      reply:
        envelope?.replyTo !== undefined
          ? this.errorReply(envelope.replyTo, { id: envelope.id, err: details.replyError ?? details.error })
          : undefined,
    });
  }

  /** An error reply: what the filter produced, or, when that cannot be JSON, the safe error record. */
  private errorReply(channel: string, message: ReplyMessage): { channel: string; message: string; ttlMs: number } {
    let json: string;
    try {
      json = JSON.stringify(message);
    } catch (error) {
      json = JSON.stringify({ id: message.id, err: toErrorRecord(message.err ?? error) });
    }
    return { channel, message: json, ttlMs: this.options.resultTtlMs };
  }
}
