import { createHash } from 'node:crypto';
import { InvalidTaskError } from '../core/model/errors.js';
import { nameProblem, taskRules, validateBackoff, validateMaxAttempts } from '../core/config/rules.js';
import type { BackoffOptions } from '../core/model/retry-policy.js';
import type { EnqueueItem, TaskOptions } from '../core/producer/task-items.js';
import { coalesceSettings, trackProblem } from '../core/config/rules.js';
import type { CoalesceOptions } from '../core/model/coalesce.js';
import type { TrackOptions } from '../core/model/task-status.js';

/** Per-task settings that override the client's defaults. */
export interface RedisTaskRecordOptions extends TaskOptions {
  /** The client (tenant) the task belongs to; claims rotate fairly over clients. */
  readonly clientId?: string;
  /** Relative expiry, turned into `expiresAt` at enqueue. */
  readonly expiresInMs?: number;
  /** `send()` only: called with each progress value the handler reports (`ctx.progress()`), in order, before the result. */
  readonly onProgress?: (value: unknown) => void;
  /** The task's id (default: generated), so the caller knows it before the task is written (`setId`). */
  readonly id?: string;
}

/** A payload with per-task settings; pass it to `emit`, `send` or `emitBatch` in place of the payload. */
const RECORD_BRAND = Symbol.for('nestjs-redis-tasks.RedisTaskRecord');

export class RedisTaskRecord<TData = unknown> {
  constructor(
    readonly data: TData,
    readonly options: RedisTaskRecordOptions = {},
  ) {
    Object.defineProperty(this, RECORD_BRAND, { value: true, enumerable: false });
  }

  /** A record made by another copy of the package (ESM next to CommonJS) is a record all the same. */
  static [Symbol.hasInstance](value: unknown): boolean {
    return (
      typeof value === 'object' && value !== null && (value as { [RECORD_BRAND]?: unknown })[RECORD_BRAND] === true
    );
  }
}

export class RedisTaskRecordBuilder<TData = unknown> {
  private options: RedisTaskRecordOptions = {};
  private dedupFromPayload = false;

  constructor(private data?: TData) {}

  setData(data: TData): this {
    this.data = data;
    return this;
  }

  /** Sets the client id: non-empty, at most 200 characters, no braces, spaces or control characters. */
  setClientId(clientId: string): this {
    const problem = nameProblem(clientId);
    if (problem) {
      throw new InvalidTaskError(`setClientId() got ${describe(clientId)}: a client id ${problem}`);
    }
    return this.set({ clientId });
  }

  /**
   * Sets the task's id (default: a generated one), so a caller knows it up front: a `send()` caller can look
   * its task up (`getTask`) or cancel it (`cancel`) while it waits for the result. Unique per task (a `send()`
   * with the id of a task still waiting for its reply is refused); at most 200 characters, no braces, spaces,
   * commas or control characters.
   */
  setId(id: string): this {
    const problem = nameProblem(id) ?? (id.includes(',') ? 'must not contain commas' : undefined);
    if (problem) {
      throw new InvalidTaskError(`setId() got ${describe(id)}: a task id ${problem}`);
    }
    return this.set({ id });
  }

  /** Runs allowed in all (the first included): an integer from 1. */
  setMaxAttempts(maxAttempts: number): this {
    validateMaxAttempts('setMaxAttempts()', maxAttempts, taskError);
    return this.set({ maxAttempts });
  }

  /** Delay before each retry: `{ type: 'fixed' | 'exponential', delayMs, maxDelayMs?, jitter? }`. */
  setBackoff(backoff: BackoffOptions): this {
    validateBackoff('setBackoff()', backoff, taskError);
    return this.set({ backoff: { ...backoff } });
  }

  /** Higher runs first within its client: an integer from 0 (the default) to 1,000,000. */
  setPriority(priority: number): this {
    needs('setPriority()', priority, taskRules.priority);
    return this.set({ priority });
  }

  /** The task becomes claimable `delayMs` after it is enqueued (kept in Redis meanwhile). */
  setDelay(delayMs: number): this {
    needs('setDelay()', delayMs, taskRules.delay);
    return this.set({ delayMs, runAt: undefined });
  }

  /** The task becomes claimable at this time (a time already past makes it claimable at once). */
  setRunAt(runAt: Date | number): this {
    return this.set({ runAt: toTime('setRunAt()', runAt), delayMs: undefined });
  }

  /** The task is not run if no worker started it within `expiresInMs` of its enqueue. */
  setExpiresIn(expiresInMs: number): this {
    needs('setExpiresIn()', expiresInMs, taskRules.expiresIn);
    return this.set({ expiresInMs, expiresAt: undefined });
  }

  /** The task is not run if no worker started it by this time; a time already past is refused. */
  setExpiresAt(expiresAt: Date | number): this {
    const time = toTime('setExpiresAt()', expiresAt);
    if (time <= Date.now()) {
      throw new InvalidTaskError(`setExpiresAt() got a time in the past (${new Date(time).toISOString()})`);
    }
    return this.set({ expiresAt: time, expiresInMs: undefined });
  }

  /**
   * Refuses a second live task with the same key (`emit` reports it as a duplicate). Without a key,
   * the key is a SHA-256 hash of the payload (its JSON with object keys sorted). The key is freed when
   * the task is acknowledged, dead-lettered or cancelled, or after `ttlMs` (default: the client's
   * `deduplicationTtlMs`). With `keepAfterSuccess`, a task that succeeded keeps the key until `ttlMs`
   * (at most one run per key per `ttlMs`: "once a day per user"); dead letters and cancel still free it.
   */
  setDeduplicationKey(key?: string, options: { ttlMs?: number; keepAfterSuccess?: boolean } = {}): this {
    if (key !== undefined) needs('setDeduplicationKey()', key, taskRules.deduplicationKey);
    const { ttlMs, keepAfterSuccess } = options;
    if (ttlMs !== undefined) needs('setDeduplicationKey() ttlMs:', ttlMs, taskRules.deduplicationTtl);
    if (keepAfterSuccess !== undefined && typeof keepAfterSuccess !== 'boolean') {
      throw new InvalidTaskError(
        `setDeduplicationKey() keepAfterSuccess needs true or false, got ${describe(keepAfterSuccess)}`,
      );
    }
    this.dedupFromPayload = key === undefined;
    return this.set({
      deduplicationKey: key,
      deduplicationTtlMs: ttlMs,
      deduplicationKeepAfterSuccess: keepAfterSuccess,
    });
  }

  /**
   * Latest wins: emits with the same key combine instead of each running ("the newest avatar wins").
   * `mode` (default `replace`):
   * - `replace`: a task of the key still waiting takes this payload in place (keeps its place in line);
   * - `debounce`: runs `delayMs` after the last emit of the key, never later than `maxWaitMs` (default
   *   10 × `delayMs`) after the first, so a steady stream of emits cannot starve it;
   * - `keep-last`: at most one task of the key runs and one waits; a new emit replaces the waiting one;
   * - `supersede`: as `keep-last`, and the running one is cancelled through its fence (its `ctx.signal`
   *   aborts with `TaskReplacedError`, its late outcome is refused).
   * The receipt names the task an emit replaced (`replaced`) or superseded (`superseded`); a `send()`
   * caller whose task was replaced gets `TaskReplacedError` naming the newer task. An older payload never
   * runs after a newer one of the same key, retries and recoveries included. Not with a deduplication key
   * or tracking; the key picks the shard of a sharded queue.
   */
  setCoalesceKey(key: string, options: CoalesceOptions = {}): this {
    const settings = coalesceSettings(key, options, (message) => {
      throw new InvalidTaskError(`setCoalesceKey(): ${message}`);
    });
    return this.set({
      coalesce: {
        key: settings.key,
        mode: settings.mode,
        ...(settings.mode === 'debounce' ? { delayMs: settings.delayMs, maxWaitMs: settings.maxWaitMs } : {}),
      },
    });
  }

  /**
   * Tracks this task (or, with false, not, whatever the client's `track` says): `getTask` tells where it
   * is, `cancel` stops it wherever it is, its progress is kept. Its index is kept `keepMs` after the task
   * ended (default 1 h) and at most `liveMs` while it waits or runs (default 7 days).
   */
  setTracked(track: boolean | TrackOptions = true): this {
    const problem = trackProblem(track);
    if (problem) throw new InvalidTaskError(`setTracked() got a value that ${problem}`);
    return this.set({ track: typeof track === 'boolean' ? track : { ...track } });
  }

  /**
   * For `send()`: `listener` hears each progress value the handler reports with `ctx.progress(value)`, in
   * order, before the Observable emits the result (so `lastValueFrom(client.send(...))` still resolves with
   * the result). A listener that throws is logged and ignored.
   */
  onProgress<TProgress = unknown>(listener: (value: TProgress) => void): this {
    if (typeof listener !== 'function') {
      throw new InvalidTaskError(`onProgress() needs a function, got ${describe(listener)}`);
    }
    return this.set({ onProgress: listener as (value: unknown) => void });
  }

  build(): RedisTaskRecord<TData> {
    const options = { ...this.options };
    if (this.dedupFromPayload) {
      options.deduplicationKey = `sha256:${createHash('sha256')
        .update(canonicalJson(this.data ?? null))
        .digest('hex')}`;
    }
    return new RedisTaskRecord(this.data as TData, options);
  }

  private set(patch: Partial<Record<keyof RedisTaskRecordOptions, unknown>>): this {
    this.options = { ...this.options, ...patch } as RedisTaskRecordOptions;
    return this;
  }
}

/** JSON with object keys sorted, so equal payloads hash equally whatever their key order. */
export function canonicalJson(value: unknown): string {
  return (
    JSON.stringify(value, (_key, inner: unknown) => {
      if (inner && typeof inner === 'object' && !Array.isArray(inner)) {
        const source = inner as Record<string, unknown>;
        return Object.fromEntries(
          Object.keys(source)
            .sort()
            .map((key) => [key, source[key]]),
        );
      }
      return inner;
    }) ?? 'null'
  );
}

function toTime(where: string, value: Date | number): number {
  const time = value instanceof Date ? value.getTime() : value;
  if (typeof time !== 'number' || !Number.isFinite(time)) {
    throw new InvalidTaskError(
      `${where} needs a Date or a number of milliseconds since the epoch, got ${describe(value)}`,
    );
  }
  return time;
}

function describe(value: unknown): string {
  return typeof value === 'string' ? JSON.stringify(value) : `${String(value)} (${typeof value})`;
}

function taskError(where: string, message: string): Error {
  return new InvalidTaskError(`${where} ${message}`);
}

/** Throws naming the setter when `value` breaks its rule (the producer's gate applies the same rules). */
function needs(setter: string, value: unknown, rule: (value: unknown) => string | undefined): void {
  const expected = rule(value);
  if (expected) throw new InvalidTaskError(`${setter} needs ${expected}, got ${describe(value)}`);
}

/** The item a record stands for: its options, the client's id where it names none, a send() task's id and channel. */
export function recordItem(
  record: RedisTaskRecord,
  clientId: string,
  now: number,
  send?: { readonly id: string; readonly replyTo: string },
): EnqueueItem {
  const options = record.options;
  return {
    payload: record.data,
    clientId: options.clientId ?? clientId,
    maxAttempts: options.maxAttempts,
    backoff: options.backoff,
    priority: options.priority,
    delayMs: options.delayMs,
    runAt: options.runAt,
    expiresAt: options.expiresInMs !== undefined ? now + options.expiresInMs : options.expiresAt,
    deduplicationKey: options.deduplicationKey,
    deduplicationTtlMs: options.deduplicationTtlMs,
    deduplicationKeepAfterSuccess: options.deduplicationKeepAfterSuccess,
    track: options.track,
    coalesce: options.coalesce,
    wantsProgress: options.onProgress ? true : undefined,
    id: send?.id ?? options.id,
    replyTo: send?.replyTo,
  };
}

/** The item of a payload or record (`clientId`: the client's default); a send() task's with its id and reply channel. */
export function taskItem(
  data: unknown,
  clientId: string,
  now = Date.now(),
  send?: { readonly id: string; readonly replyTo: string },
): EnqueueItem {
  if (data instanceof RedisTaskRecord) return recordItem(data, clientId, now, send);
  return send ? { payload: data, clientId, id: send.id, replyTo: send.replyTo } : { payload: data, clientId };
}

/**
 * The item of a `send()` packet's data: the caller's own id (`RedisTaskRecordBuilder.setId`, so it can look
 * the task up or cancel it) or a new one, the reply channel it is answered on, and its progress listener.
 */
export function sendItem(
  data: unknown,
  clientId: string,
  replyTo: string,
  newId: () => string,
): { item: EnqueueItem & { readonly id: string }; onProgress: ((value: unknown) => void) | undefined } {
  const id = (data instanceof RedisTaskRecord ? data.options.id : undefined) ?? newId();
  const item = taskItem(data, clientId, Date.now(), { id, replyTo }) as EnqueueItem & { readonly id: string };
  return { item, onProgress: data instanceof RedisTaskRecord ? data.options.onProgress : undefined };
}
