import { BatchIdInUseError, InvalidTaskError, RedisUnavailableError } from '../model/errors.js';
import { BATCH_DEFAULT_KEEP_MS, type BatchCallback, type BatchOptions } from '../model/batch.js';
import type { BatchKeys } from '../redis/keys.js';
import type { TaskStore } from '../redis/store.js';
import { describe } from '../support/describe.js';
import { nameProblem, patternProblem } from '../config/rules.js';
import { newTaskId, type EnqueueItem, type EnqueueReceipt, type TaskProducer } from '../producer/producer.js';
import { COUNT_MARKER_MS, enqueueCallbacks } from './batch-callbacks.js';
import { BATCH_RECHECK_MS } from './batch-folder.js';

/** A batch's options checked, with the defaults filled in. */
export interface ResolvedBatchOptions {
  readonly id: string;
  readonly onComplete: BatchCallback;
  readonly onSuccess?: BatchCallback;
  readonly keepMs: number;
}

/** What a batch works with: its producer's connection, keys, layouts and producer. */
export interface BatchParts {
  /** The producer's store (its connection, keys, layouts and gateway). */
  readonly store: TaskStore;
  readonly producer: TaskProducer;
}

/** Checks a batch's options (throwing `InvalidTaskError` naming the problem); callbacks default to `clientId`. */
export function resolveBatchOptions(options: BatchOptions, clientId: string): ResolvedBatchOptions {
  const fail = (message: string): never => {
    throw new InvalidTaskError(`batch: ${message}`);
  };
  if (typeof options !== 'object' || options === null) fail(`options must be { id?, onComplete, onSuccess?, keepMs? }`);
  const id = options.id ?? newTaskId();
  const idProblem = nameProblem(id) ?? (id.includes(',') ? 'must not contain commas' : undefined);
  if (idProblem) fail(`the id ${idProblem}, got ${describe(id)}`);
  const callback = (name: string, value: BatchCallback | undefined): BatchCallback | undefined => {
    if (value === undefined) return undefined;
    if (typeof value !== 'object' || value === null) return fail(`${name} must be { pattern, payload?, clientId? }`);
    const problem = patternProblem(value.pattern);
    if (problem) fail(`${name}.pattern ${problem}, got ${describe(value.pattern)}`);
    const client = value.clientId ?? clientId;
    const clientProblem = nameProblem(client);
    if (clientProblem) fail(`${name}.clientId ${clientProblem}, got ${describe(client)}`);
    return {
      pattern: value.pattern,
      clientId: client,
      ...(value.payload === undefined ? {} : { payload: value.payload }),
    };
  };
  const onComplete = callback('onComplete', options.onComplete) ?? fail('onComplete is required');
  const keepMs = options.keepMs ?? BATCH_DEFAULT_KEEP_MS;
  if (!Number.isInteger(keepMs) || keepMs < 1)
    fail(`keepMs must be a positive integer of milliseconds, got ${describe(keepMs)}`);
  return { id, onComplete, onSuccess: callback('onSuccess', options.onSuccess), keepMs };
}

/**
 * A batch on the producer side: `add` counts tasks in it before they are enqueued (so it can never
 * complete without them) and enqueues them; `seal` says no more will come, and fires it when its tasks all
 * settled already. Opened on first use: in the due index first (a crash after it completed is found
 * there), then its record.
 */
export class TaskBatch {
  private opened: Promise<void> | undefined;
  private readonly keys: BatchKeys;

  constructor(
    private readonly parts: BatchParts,
    private readonly options: ResolvedBatchOptions,
  ) {
    this.keys = parts.store.keys.batch(options.id);
  }

  get id(): string {
    return this.options.id;
  }

  /** Enqueues tasks of the batch (each chunk all or nothing, as `emitBatch`); their receipts, in order. */
  async add(queue: string, items: readonly EnqueueItem[]): Promise<EnqueueReceipt[]> {
    await this.open();
    const children = items.map((item) => ({ ...item, id: item.id ?? newTaskId(), batch: this.options.id }));
    const ids = children.map((child) => child.id);
    // Counted first, with the pattern a cancel looks for them in (a pattern recorded in vain costs a look).
    const state = await this.parts.store.gateway.batch.add(this.keys, queue, ids);
    if (state !== 'open')
      throw new InvalidTaskError(`batch "${this.options.id}" is ${state}: no task can be added to it`);
    try {
      return await this.parts.producer.enqueue(queue, children);
    } catch (error) {
      // Nothing was written: the batch must not wait for them. (Maybe written: they stay counted.)
      if (error instanceof InvalidTaskError || (error instanceof RedisUnavailableError && error.written === false)) {
        await this.parts.store.gateway.batch.takeBack(this.keys, ids).catch(() => undefined);
      }
      throw error;
    }
  }

  /** No task will be added any more; fires the batch at once when every task settled already. */
  async seal(): Promise<void> {
    await this.open();
    const answer = await this.parts.store.gateway.batch.seal(this.keys);
    if (answer.kind === 'fire') {
      await enqueueCallbacks(this.parts.store, this.options.id, answer);
    }
  }

  private open(): Promise<void> {
    this.opened ??= (async () => {
      const { redis, keys, gateway } = this.parts.store;
      await redis.zadd(keys.batchesDue, 'NX', Date.now() + BATCH_RECHECK_MS, this.options.id);
      const { onComplete, onSuccess, keepMs } = this.options;
      const { state, ttlMs } = await gateway.batch.open(this.keys, onComplete, onSuccess, keepMs);
      // Counted for metrics (once per batch: only the open that made it, under a marker a resend finds; a
      // crash here loses one count). The marker outlives any resend, never the batch's keys (an id used again).
      if (state === 'opened') {
        const marker = keys.batchCounted(this.options.id, 'open', 'o');
        await gateway.batch.count(keys.batchCounters, marker, 'opened', Math.min(keepMs, COUNT_MARKER_MS));
      } else if (state !== 'open') throw new BatchIdInUseError(this.options.id, state, ttlMs);
    })().catch((error: unknown) => {
      this.opened = undefined;
      throw error;
    });
    return this.opened;
  }
}
