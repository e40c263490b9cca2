import { decodeEntry, guessTaskId } from './codec.js';
import type { QueueKeys } from './keys.js';
import type { TaskLogger } from './logger.js';
import type { TaskRedis } from './scripts.js';
import { ClaimedTask, type SettleOptions } from './claimed-task.js';
import { ScriptKeys } from './script-keys.js';

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
  const held = (await redis.hgetall(processing)) as Record<string, string>;
  const wanted = options.tokens ? new Set(options.tokens) : undefined;
  const tokens = Object.keys(held)
    .filter((token) => !wanted || wanted.has(token))
    // Newest first: each LPUSH puts an older task in front of a newer one, restoring claim order (one
    // process's tokens sort in claim order; see ClaimLoop).
    .sort()
    .reverse();
  const scriptKeys = new ScriptKeys([processing, keys.ring, keys.sequence, keys.prioritized, keys.counted, keys.inflight, keys.parked, keys.faults]);
  const fields: (string | number)[] = [];
  let malformed = 0;
  for (const token of tokens) {
    const decoded = decodeEntry(held[token]);
    if (!decoded.ok) {
      const task = new ClaimedTask(redis, keys, token, held[token], settle);
      if (await task.deadLetter({ reason: 'malformed', attempts: 0, detail: decoded.reason })) {
        malformed++;
        options.logger?.warn(
          `moved malformed task ${guessTaskId(held[token]) ?? '(no id)'} of "${keys.queue}" to dead letters: ${decoded.reason}`,
        );
      }
      continue;
    }
    const { clientId, priority } = decoded.entry.envelope;
    fields.push(token, ...scriptKeys.client(keys, clientId), clientId, priority ?? 0);
  }
  if (fields.length === 0) {
    return { requeued: 0, malformed };
  }
  const requeued = await redis.requeueTasks(...(scriptKeys.args as [number]), options.countAttempt ? 1 : 0, ...fields);
  return { requeued, malformed };
}
