import { decodeEntry, guessTaskId } from '../model/codec.js';
import type { QueueKeys } from './keys.js';
import type { TaskLogger } from '../support/logger.js';
import type { TaskRedis } from './scripts.js';
import { undecodableRecord } from '../model/dead-letter.js';
import { gatewayOf, type HeldTask } from './gateway.js';

/** Whose processing hash, and how its dead letters are written. */
export interface SettleOptions {
  readonly workerId: string;
  readonly deadLetterCap: number;
  readonly resultTtlMs: number;
}

export interface RequeueResult {
  readonly requeued: number;
  readonly malformed: number;
}

/**
 * Returns tasks held in a worker's processing hash to the heads of their clients' lists (all of them,
 * or only `tokens`). Entries that cannot be decoded have no client list to return to: they go to dead
 * letters with reason `malformed`. The script moves only tokens still present, so concurrent callers
 * never requeue a task twice.
 */
export async function requeueProcessing(
  redis: TaskRedis,
  keys: QueueKeys,
  settle: SettleOptions,
  options: { countAttempt: boolean; tokens?: readonly string[]; logger?: TaskLogger },
): Promise<RequeueResult> {
  const processing = keys.processing(settle.workerId);
  const entries = (await redis.hgetall(processing)) as Record<string, string>;
  const wanted = options.tokens ? new Set(options.tokens) : undefined;
  const tokens = Object.keys(entries)
    .filter((token) => !wanted || wanted.has(token))
    // Newest first: each LPUSH puts an older task in front of a newer one, restoring claim order (one
    // process's tokens sort in claim order; see ClaimLoop).
    .sort()
    .reverse();
  const gateway = gatewayOf(redis);
  const held: HeldTask[] = [];
  let malformed = 0;
  for (const token of tokens) {
    const decoded = decodeEntry(entries[token]);
    if (!decoded.ok) {
      const id = guessTaskId(entries[token]);
      const record = undecodableRecord(keys.queue, entries[token], decoded, settle.workerId, id);
      if (await gateway.deadLetter(keys, settle.workerId, token, { record: JSON.stringify(record), cap: settle.deadLetterCap, taskId: id })) {
        malformed++;
        options.logger?.warn(`moved ${record.reason} task ${id ?? '(no id)'} of "${keys.queue}" to dead letters: ${decoded.reason}`);
      }
      continue;
    }
    const { clientId, priority } = decoded.entry.envelope;
    held.push({ token, clientId, priority: priority ?? 0 });
  }
  if (held.length === 0) {
    return { requeued: 0, malformed };
  }
  const requeued = await gateway.requeue(keys, settle.workerId, options.countAttempt, held);
  return { requeued, malformed };
}
