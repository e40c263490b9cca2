import type { QueueKeys, QueueLayout } from '../redis/keys.js';
import type { TaskRedis } from '../redis/scripts.js';
import { ClosedError, RedisTaskError } from '../model/errors.js';
import { SlotSet } from '../support/churn-tables.js';
import { coalescerOf, type CallSettings, type EnqueueCoalescer, type EnqueuePart } from './enqueue-coalescer.js';
import type { EnqueueErrors } from './enqueue-errors.js';
import type { PreparedTask } from './task-items.js';
import type { EnqueueReceipt, ProducerOptions } from './producer-types.js';

/** A task's receipt from its enqueue result (see enqueueTasks-1.lua's Returns). */
export function receipt(task: PreparedTask, holder: 0 | string | undefined): EnqueueReceipt {
  if (holder === 0 || holder === undefined) return { id: task.id, duplicate: false };
  const mark = holder.charCodeAt(0);
  if (mark === 1) return { id: task.id, duplicate: false, replaced: holder.slice(1) };
  if (mark === 2) return { id: task.id, duplicate: false, superseded: holder.slice(1) };
  return { id: String(holder), duplicate: true };
}

/** What picks a task's shard: its coalescing key (every task of a key meets in one shard), else its client. */
export function shardKeyOf(task: PreparedTask): string {
  return task.coalesce === undefined ? task.clientId : task.coalesce.key;
}

/**
 * A producer's hand-over of prepared tasks to the connection's coalescer: shard by shard, chunk by chunk
 * (each chunk one script call, all or nothing), each part answered or failed exactly once; on close, the
 * parts still out are failed (known not written when not sent yet).
 */
export class EnqueueHandOver {
  /** Parts handed to the coalescer and not answered yet (per task: no Set, see SlotSet). */
  private readonly parts = new SlotSet<EnqueuePart>();
  private readonly coalescer: EnqueueCoalescer;
  private readonly settings: CallSettings;
  /** Producers with equal settings on one connection share script calls. */
  private readonly signature: string;

  constructor(
    redis: TaskRedis,
    private readonly options: ProducerOptions,
    private readonly errors: EnqueueErrors,
  ) {
    this.coalescer = coalescerOf(redis);
    this.settings = {
      chunkSize: options.batchChunkSize,
      timeoutMs: options.enqueueTimeoutMs,
      durability: options.durability,
    };
    const durability = options.durability;
    this.signature = `${options.batchChunkSize}:${options.enqueueTimeoutMs}:${durability ? `${durability.replicas}/${durability.timeoutMs}` : '-'}`;
  }

  /** Fails every part still out (the client is closing): with nothing sent, known not written. */
  close(): void {
    this.coalescer.answerWaiting(); // written and answered: only the callers' turn had not come
    for (const part of this.parts.values()) {
      part.fail(
        part.sent
          ? this.errors.unavailable(part.keys.queue, 'unknown', 'the client closed before Redis answered')
          : new ClosedError('RedisTaskClient'),
      );
    }
  }

  /** Hands the tasks over shard by shard; receipts in item order. */
  async submit(layout: QueueLayout, prepared: PreparedTask[]): Promise<EnqueueReceipt[]> {
    if (layout.shardCount === 1) return this.submitShard(layout.shards[0], prepared);
    // Each shard is its own slot (possibly its own node): one call per shard.
    const receipts: EnqueueReceipt[] = new Array<EnqueueReceipt>(prepared.length);
    await Promise.all(
      [...indexesByShard(layout, prepared)].map(async ([shard, indexes]) => {
        const shardReceipts = await this.submitShard(
          shard,
          indexes.map((index) => prepared[index]),
        );
        indexes.forEach((index, i) => (receipts[index] = shardReceipts[i]));
      }),
    );
    return receipts;
  }

  /** One shard's tasks, chunk by chunk (each chunk one call, all or nothing). */
  private async submitShard(keys: QueueKeys, prepared: PreparedTask[]): Promise<EnqueueReceipt[]> {
    const chunkSize = this.options.batchChunkSize;
    if (prepared.length <= chunkSize) return this.submitChunk(keys, prepared);
    const receipts: EnqueueReceipt[] = [];
    for (let start = 0; start < prepared.length; start += chunkSize) {
      receipts.push(...(await this.submitChunk(keys, prepared.slice(start, start + chunkSize))));
    }
    return receipts;
  }

  private submitChunk(keys: QueueKeys, chunk: PreparedTask[]): Promise<EnqueueReceipt[]> {
    return new Promise((resolve, reject) => {
      this.hand(keys, chunk, (results, at) => resolve(chunk.map((task, i) => receipt(task, results[at + i]))), reject);
    });
  }

  /** Gives a part to the coalescer; it is answered (or failed, its error named) exactly once. */
  hand(
    keys: QueueKeys,
    tasks: readonly PreparedTask[],
    answer: (results: readonly (0 | string)[], at: number) => void,
    reject: (error: Error) => void,
  ): void {
    const awaiting = this.options.awaitingReply;
    // A coalesced task is not removed at its caller's reply timeout (its key's record names it): not handed.
    if (awaiting) for (const task of tasks) if (task.awaitsReply && !task.coalesce) awaiting(keys, task);
    const parts = this.parts;
    const part: EnqueuePart = {
      keys,
      tasks,
      sent: false,
      settled: false,
      answer(results, at) {
        if (part.settled) return;
        part.settled = true;
        parts.delete(slot, part);
        const lost = bodiesLost(tasks, results, at);
        if (lost) reject(lost);
        else answer(results, at);
      },
      fail: (error) => {
        if (part.settled) return;
        part.settled = true;
        parts.delete(slot, part);
        reject(this.errors.ofPart(part, error));
      },
    };
    const slot = parts.add(part);
    this.coalescer.add(this.signature, this.settings, part);
  }
}

/**
 * The error of a part whose tasks' out-of-line payloads were gone when their enqueue ran (a `'\x03'` result:
 * evicted, or their TTL ran out before a late resend; those tasks were not written), or undefined.
 */
function bodiesLost(
  tasks: readonly PreparedTask[],
  results: readonly (0 | string)[],
  at: number,
): RedisTaskError | undefined {
  const lost: string[] = [];
  for (let i = 0; i < tasks.length; i++) {
    const result = results[at + i];
    if (result !== 0 && result !== undefined && result.charCodeAt(0) === 3) lost.push(tasks[i].id);
  }
  if (lost.length === 0) return undefined;
  return new RedisTaskError(
    'PAYLOAD_LOST',
    `nestjs-redis-tasks: the out-of-line payload of ${lost.length === tasks.length ? 'the task' : `task ${lost.join(', ')}`} ` +
      `was gone from Redis (evicted?) before its enqueue ran; ${lost.length === tasks.length ? 'nothing was written' : 'those tasks were not written, the others were'}: emit again`,
  );
}

/** The indexes of `prepared` per shard of the layout, in item order. */
function indexesByShard(layout: QueueLayout, prepared: readonly PreparedTask[]): Map<QueueKeys, number[]> {
  // table-ok: lives for one call
  const byShard = new Map<QueueKeys, number[]>();
  prepared.forEach((task, index) => {
    const shard = layout.shardOf(shardKeyOf(task));
    const indexes = byShard.get(shard);
    if (indexes) indexes.push(index);
    else byShard.set(shard, [index]);
  });
  return byShard;
}
