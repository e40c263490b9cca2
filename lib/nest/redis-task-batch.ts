import { TaskBatch, type ResolvedBatchOptions } from '../core/batches/task-batch.js';
import type { EnqueueItem, EnqueueReceipt } from '../core/producer/producer.js';
import type { ProducerRuntime } from '../core/producer/producer-runtime.js';
import { InvalidTaskError } from '../core/model/errors.js';
import type { CallsWithin } from '../core/producer/call-within.js';
import type { RedisTaskRecord } from './redis-task-record.builder.js';

/** What a batch gets from its client once connected: its runtime, and how the client makes items and patterns. */
export interface BatchHost {
  readonly runtime: ProducerRuntime;
  item(data: unknown): EnqueueItem;
  pattern(pattern: string): string;
}

/**
 * A batch of tasks with a callback (fan-out, then fan-in): `add` enqueues tasks of the batch (any pattern,
 * as often as you like while it is open), `seal` says no more will come. Once every task of a sealed batch
 * settled (succeeded, or ended in dead letters), its `onComplete` task is enqueued exactly once, with a
 * summary (counts, the ids of the tasks that failed); `onSuccess` too when every task succeeded. Made by
 * `RedisTaskClient.batch()`; `RedisTaskAdmin.getBatch(id)` tells where it is.
 */
export class RedisTaskBatch {
  /** Made by `RedisTaskClient.batch()` (see `openBatch`): its wiring stays out of its public shape. */
  constructor(
    /** The batch id (given, or generated). */
    readonly id: string,
  ) {}

  /**
   * Enqueues tasks of the batch for one pattern, as `emitBatch` does (payloads or records; each chunk all
   * or nothing); resolves with their receipts. Refused once the batch is sealed.
   */
  async add<TInput = unknown>(
    pattern: unknown,
    items: readonly (TInput | RedisTaskRecord<TInput>)[],
  ): Promise<EnqueueReceipt[]> {
    if (!Array.isArray(items)) throw new InvalidTaskError(`batch.add() needs an array of items, got ${typeof items}`);
    return this.within('batch.add()', async () => {
      const { batch, host } = await this.opened();
      return batch.add(
        host.pattern(pattern as string),
        items.map((item) => host.item(item)),
      );
    });
  }

  /** No more tasks: the batch completes once those added settled (at once, if they all have). */
  async seal(): Promise<void> {
    await this.within('batch.seal()', async () => (await this.opened()).batch.seal(), 'calling seal() again is safe');
  }

  /** A batch of exactly these tasks: added, then sealed (`emitBatch(pattern, items, { batch })`). */
  async addAndSeal<TInput = unknown>(
    pattern: unknown,
    items: readonly (TInput | RedisTaskRecord<TInput>)[],
  ): Promise<EnqueueReceipt[]> {
    const receipts = await this.add(pattern, items);
    await this.seal();
    return receipts;
  }

  private within<T>(what: string, work: () => Promise<T>, retry?: string): Promise<T> {
    const wired = WIRING.get(this);
    if (!wired) throw new InvalidTaskError('a RedisTaskBatch is made by RedisTaskClient.batch()');
    return wired.within(what, work, retry);
  }

  private async opened(): Promise<{ batch: TaskBatch; host: BatchHost }> {
    const wired = WIRING.get(this);
    if (!wired) throw new InvalidTaskError('a RedisTaskBatch is made by RedisTaskClient.batch()');
    const host = await wired.host();
    // A client that reconnected has a new runtime: the batch follows it.
    if (wired.core?.host.runtime !== host.runtime) {
      const { runtime } = host;
      wired.core = {
        host,
        batch: new TaskBatch({ store: runtime.store, producer: runtime.producer }, wired.options),
      };
    }
    return wired.core;
  }
}

/** What a batch is wired to: its options, its client, and the core batch over the client's current runtime. */
interface Wiring {
  readonly options: ResolvedBatchOptions;
  readonly host: () => Promise<BatchHost>;
  readonly within: CallsWithin;
  core?: { batch: TaskBatch; host: BatchHost };
}

// table-ok: one entry per batch object, dropped with it
const WIRING = new WeakMap<RedisTaskBatch, Wiring>();

/** A batch of a client (`RedisTaskClient.batch()`), wired to it. */
export function openBatch(
  within: CallsWithin,
  options: ResolvedBatchOptions,
  host: () => Promise<BatchHost>,
): RedisTaskBatch {
  const batch = new RedisTaskBatch(options.id);
  WIRING.set(batch, { options, host, within });
  return batch;
}
