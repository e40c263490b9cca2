import { namedRecord } from './call-record.js';
import type { QueueKeys } from './keys.js';
import type { TaskRedis } from './scripts.js';

/** One relayed task: the call record it is enqueued under, and the enqueue script's fields of the task. */
export interface RecordedCall {
  readonly recordId: string;
  readonly fields: readonly (string | number)[];
}

/** The record id of an outbox row's task (`ob.<task id>`): the same on every relay of the row. */
export function outboxRecordId(taskId: string): string {
  return `ob.${taskId}`;
}

/** How long a relayed task's record is kept once the relay's delete committed (ms). */
const CONFIRMED_RECORD_MS = 10_000;

/**
 * The outbox relay's enqueue of one shard's tasks: one enqueueTasks call per task, each under a call record
 * named for its task (mode '2': a call whose record exists writes nothing, so a row relayed again after a
 * crash is enqueued once), all in one pipeline (one round trip); with `durability`, a WAIT ends it and too
 * few replicas fail the call (the rows wait and are relayed again: their records answer). Resolves with how
 * many replicas confirmed (-1 without durability).
 */
export async function enqueueRecorded(
  redis: TaskRedis,
  keys: QueueKeys,
  calls: readonly RecordedCall[],
  recordMs: number,
  durability: { readonly replicas: number; readonly timeoutMs: number } | undefined,
): Promise<number> {
  const pipeline = redis.pipeline() as unknown as {
    enqueueTasks(root: string, ...args: (string | number)[]): unknown;
    wait(replicas: number, timeout: number): unknown;
    exec(): Promise<[Error | null, unknown][] | null>;
  };
  const ttlSeconds = Math.ceil(recordMs / 1_000);
  for (const call of calls) pipeline.enqueueTasks(keys.root, namedRecord(call.recordId, ttlSeconds), ...call.fields);
  if (durability) pipeline.wait(durability.replicas, durability.timeoutMs);
  const replies = await pipeline.exec();
  if (!replies || replies.length !== calls.length + (durability ? 1 : 0))
    throw new Error('the relay pipeline was discarded');
  for (let i = 0; i < calls.length; i++) {
    const [error, answer] = replies[i];
    if (error) throw error;
    if (!Array.isArray(answer)) throw new Error('enqueueTasks answered a relayed task unexpectedly');
  }
  return durability ? Number(replies[calls.length][1]) : -1;
}

/** The records of tasks whose rows are gone for good: kept CONFIRMED_RECORD_MS more. Best effort. */
export function shortenRecords(redis: TaskRedis, keys: QueueKeys, recordIds: readonly string[]): void {
  const pipeline = redis.pipeline();
  for (const id of recordIds) pipeline.pexpire(keys.call(id), CONFIRMED_RECORD_MS);
  pipeline.exec().catch(() => undefined);
}
