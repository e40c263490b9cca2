import type { QueueKeys } from '../redis/keys.js';
import { perConnection } from '../redis/per-connection.js';
import { gatewayOf } from '../redis/gateway.js';
import type { AckItem } from '../model/prepared-task.js';
import type { CoalescedStart } from '../redis/track-gateway.js';
import { loadBodies } from '../redis/bodies.js';

/** One item waiting for its call, and its caller. */
interface Pending<TItem, TAnswer> {
  readonly item: TItem;
  readonly resolve: (answer: TAnswer) => void;
  readonly reject: (error: unknown) => void;
}

interface Batch<TItem, TAnswer> {
  readonly keys: QueueKeys;
  readonly workerId: string;
  readonly items: Pending<TItem, TAnswer>[];
}

/** The script call a batch makes: one answer per item, in order. */
export type BatchCall<TItem, TAnswer> = (keys: QueueKeys, workerId: string, items: TItem[]) => Promise<TAnswer[]>;

/**
 * The per-task script calls of one event-loop turn, made as one call per worker and queue shard right
 * after the turn (`process.nextTick`): the acknowledgements that cannot ride on the claim call (a send()
 * task's reply, a deduplication key to free, a tracked task's index), and the starts of tracked tasks.
 * Each item stays fenced on its own token and is answered on its own.
 */
export class TurnBatch<TItem, TAnswer> {
  /** This turn's batches (a few): a new list each turn, never a cleared Map (see churn-tables.ts). */
  private waiting: Batch<TItem, TAnswer>[] = [];
  private scheduled = false;

  constructor(private readonly call: BatchCall<TItem, TAnswer>) {}

  /** Resolves with the item's own answer once the turn's call came back. */
  add(keys: QueueKeys, workerId: string, item: TItem): Promise<TAnswer> {
    return new Promise((resolve, reject) => {
      // One batch per worker and shard (its processing hash): found by those two, no key built per item.
      let batch: Batch<TItem, TAnswer> | undefined;
      for (const waiting of this.waiting)
        if (waiting.workerId === workerId && waiting.keys.base === keys.base) batch = waiting;
      if (batch) batch.items.push({ item, resolve, reject });
      else this.waiting.push({ keys, workerId, items: [{ item, resolve, reject }] });
      if (!this.scheduled) {
        this.scheduled = true;
        process.nextTick(this.flush);
      }
    });
  }

  private readonly flush = (): void => {
    this.scheduled = false;
    const batches = this.waiting;
    this.waiting = [];
    for (const { keys, workerId, items } of batches) {
      this.call(
        keys,
        workerId,
        items.map((pending) => pending.item),
      ).then(
        (answers) => items.forEach((pending, i) => pending.resolve(answers[i])),
        (error: unknown) => items.forEach((pending) => pending.reject(error)),
      );
    }
  };
}

/** Successes settled with `ackTasks`: true once Redis removed the task, false when no longer held (lease lost). */
export type AckBatch = TurnBatch<AckItem, boolean>;

/** A tracked task about to run (see startTasks-2.lua). */
export interface StartItem {
  readonly token: string;
  readonly id: string;
  readonly attempt: number;
}

/** Starts of tracked tasks: 'run', 'cancelled' (a cancel came first: do not run it) or 'lost'. */
export type StartBatch = TurnBatch<StartItem, 'run' | 'cancelled' | 'lost'>;

/** Starts of tasks with a coalescing key (see startCoalesced-1.lua). */
export type CoalescedStartBatch = TurnBatch<{ readonly token: string; readonly id: string }, CoalescedStart>;

/** The acknowledgement batch of a connection (shared by every worker using it). */
export const ackBatchOf = perConnection(
  (redis): AckBatch => new TurnBatch((keys, workerId, acks) => gatewayOf(redis).acknowledge(keys, workerId, acks)),
);

/** The tracked-start batch of a connection (shared by every worker using it). */
export const startBatchOf = perConnection(
  (redis): StartBatch => new TurnBatch((keys, workerId, tasks) => gatewayOf(redis).track.start(keys, workerId, tasks)),
);

/** The coalesced-start batch of a connection (shared by every worker using it). */
export const coalescedStartBatchOf = perConnection(
  (redis): CoalescedStartBatch =>
    new TurnBatch((keys, workerId, tasks) => gatewayOf(redis).track.startCoalesced(keys, workerId, tasks)),
);

/** Out-of-line payloads read after a claim (one MGET per turn and shard): each as stored, or undefined when gone. */
export type BodyBatch = TurnBatch<string, string | undefined>;

/** The out-of-line payload batch of a connection (shared by every worker using it). */
export const bodyBatchOf = perConnection(
  (redis): BodyBatch => new TurnBatch((keys, _workerId, ids) => loadBodies(redis, keys, ids)),
);

/** A connection's batches of the per-task calls between a claim and a handler (each one call per turn and shard). */
export interface TurnBatches {
  /** Starts of tracked tasks. */
  readonly starts?: StartBatch;
  /** Starts of tasks with a coalescing key. */
  readonly coalescedStarts?: CoalescedStartBatch;
  /** Reads of out-of-line payloads. */
  readonly bodies?: BodyBatch;
}

/** The batches of a connection (shared by every worker using it). */
export function turnBatchesOf(redis: Parameters<typeof startBatchOf>[0]): TurnBatches {
  return { starts: startBatchOf(redis), coalescedStarts: coalescedStartBatchOf(redis), bodies: bodyBatchOf(redis) };
}
