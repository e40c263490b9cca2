import { decodeEntry, guessTaskId } from '../model/codec.js';
import type { QueueKeys } from './keys.js';
import type { TaskLogger } from '../support/logger.js';
import type { TaskRedis } from './scripts.js';
import { undecodableRecord } from '../model/dead-letter.js';
import { hasTrait } from '../model/task-traits.js';
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
  /** The worker renewed its lease after `expiredBy`: it is alive, and nothing was moved. */
  readonly alive?: boolean;
}

/**
 * Returns tasks held in a worker's processing hash to the heads of their clients' lists (all of them,
 * or only `tokens`). Entries that cannot be decoded have no client list to return to: they go to dead
 * letters with reason `malformed`. The script moves only tokens still present, so concurrent callers
 * never requeue a task twice.
 *
 * Given `entries` (token -> entry, as a claim returned them), nothing is read first: the requeue is sent
 * before this returns, so a command sent after it on the same connection (the loop's next claim) finds
 * the tasks back in place; reading the hash first would let such a claim overtake them.
 */
export async function requeueProcessing(
  redis: TaskRedis,
  keys: QueueKeys,
  settle: SettleOptions,
  options: {
    countAttempt: boolean;
    tokens?: readonly string[];
    entries?: Readonly<Record<string, string>>;
    logger?: TaskLogger;
    /** A reaper's recovery: only while the worker's lease still ends by this time (Redis ms); see `alive`. */
    expiredBy?: number;
  },
): Promise<RequeueResult> {
  const entries =
    options.entries ?? ((await redis.hgetall(keys.processing(settle.workerId))) as Record<string, string>);
  const wanted = options.tokens ? new Set(options.tokens) : undefined;
  const tokens = Object.keys(entries)
    .filter((token) => !wanted || wanted.has(token))
    // Newest first: each LPUSH puts an older task in front of a newer one, restoring claim order (one
    // process's tokens sort in claim order; see ClaimLoop).
    .sort()
    .reverse();
  const gateway = gatewayOf(redis);
  const { held, undecodable } = heldTasksOf(keys, entries, tokens);
  // Sent first (nothing awaited before it when `entries` are given), dead letters after; a failure is
  // reported by the await below, not as an unhandled rejection while the dead letters are written.
  const requeued =
    held.length > 0
      ? gateway.requeue(keys, settle.workerId, options.countAttempt, held, options.expiredBy)
      : Promise.resolve(0);
  requeued.catch(() => undefined);
  if (options.expiredBy !== undefined && held.length > 0 && (await requeued) === -1) {
    return { requeued: 0, malformed: 0, alive: true };
  }
  let malformed = 0;
  for (const [token, decoded] of undecodable) {
    const id = guessTaskId(entries[token]);
    const record = undecodableRecord(keys.queue, entries[token], decoded, settle.workerId, id);
    if (
      await gateway.deadLetter(keys, settle.workerId, token, {
        record: JSON.stringify(record),
        cap: settle.deadLetterCap,
        taskId: id,
      })
    ) {
      malformed++;
      options.logger?.warn(
        `moved ${record.reason} task ${id ?? '(no id)'} of "${keys.queue}" to dead letters: ${decoded.reason}`,
      );
    }
  }
  return { requeued: await requeued, malformed };
}

/** The held tasks to return, each with its client, priority and tracked keys; the entries that cannot be read. */
function heldTasksOf(
  keys: QueueKeys,
  entries: Readonly<Record<string, string>>,
  tokens: readonly string[],
): {
  held: HeldTask[];
  undecodable: [token: string, reason: Extract<ReturnType<typeof decodeEntry>, { ok: false }>][];
} {
  const held: HeldTask[] = [];
  const undecodable: [token: string, reason: Extract<ReturnType<typeof decodeEntry>, { ok: false }>][] = [];
  for (const token of tokens) {
    const decoded = decodeEntry(entries[token]);
    if (decoded.ok) {
      const { envelope } = decoded.entry;
      const tracked = hasTrait(envelope, 'tracked') ? keys.tracked(envelope.id) : undefined;
      held.push({ token, clientId: envelope.clientId, priority: envelope.priority ?? 0, tracked });
    } else undecodable.push([token, decoded]);
  }
  return { held, undecodable };
}
