import type { QueueKeys } from './keys.js';
import type { TaskRedis } from './scripts.js';
import type { PreparedTask } from '../model/prepared-task.js';

/**
 * Out-of-line payloads (scripts/include/body.lua): the producer stores each with a plain SET before the
 * enqueue call that names it, and a worker reads them with a plain GET after its claim, so a large payload
 * never crosses into a script (each crossing of 16 KB costs Redis about 20 µs; a plain SET or GET about 10).
 */

/**
 * How long a body stored by the producer lives unless the enqueue that names it keeps it (ms): past any
 * resend of that call (its call record lives the caller's wait and a margin; waits are at most an hour).
 * A body whose call never ran goes by itself.
 */
export const BODY_PENDING_MS = 2 * 3_600_000;

/**
 * `send()` (an enqueue call) with the out-of-line payloads of its tasks stored just before it, on the same
 * connection and without waiting (one round trip: Redis runs them in order); at once, with no promise of its
 * own, when it has none (the common case). When storing fails, the call fails with that error: the script
 * found no body for those tasks and wrote nothing of them (`'\x03'`), and a full Redis refused the call too.
 */
export function afterBodies<T>(
  redis: TaskRedis,
  keys: QueueKeys,
  batches: readonly { readonly tasks: readonly PreparedTask[] }[],
  send: () => Promise<T>,
): Promise<T> {
  const bodies = bodiesOf(batches);
  if (bodies.length === 0) return send();
  const stored = storeBodies(redis, keys, bodies);
  return Promise.all([stored, send()]).then(([, answer]) => answer);
}

/** The tasks of one enqueue call whose payloads go out of line. */
function bodiesOf(batches: readonly { readonly tasks: readonly PreparedTask[] }[]): PreparedTask[] {
  let found: PreparedTask[] | undefined;
  for (const batch of batches)
    for (const task of batch.tasks)
      if (task.body !== undefined) {
        found ??= [];
        found.push(task);
      }
  return found ?? NONE;
}
const NONE: PreparedTask[] = [];

/**
 * Stores the bodies of `tasks` under the shard's root, each with a TTL (the enqueue keeps those of the tasks
 * it writes). Rejects with the first error (Redis full, a connection lost). One command per body, each written
 * to the socket on its own, not a pipeline: a pipeline joins its commands into one string before writing it
 * (a megabyte for the 64 bodies of 16 KB one event-loop turn may hold), which V8 allocates in its large-object
 * space; measured: the producer's CPU per emit of 16 KB, 64 in flight, about 120 µs that way against 50.
 */
async function storeBodies(redis: TaskRedis, keys: QueueKeys, tasks: readonly PreparedTask[]): Promise<void> {
  await Promise.all(
    tasks.map((task) => redis.set(keys.rootBody(task.body!.id), task.body!.json, 'PX', BODY_PENDING_MS)),
  );
}

/**
 * The bodies `ids` of one shard's base (a consumer group's copies under its base), as stored: undefined
 * where one is gone (or a key of another type holds its name). One round trip.
 */
export async function loadBodies(
  redis: TaskRedis,
  keys: QueueKeys,
  ids: readonly string[],
): Promise<(string | undefined)[]> {
  const found = await redis.mget(ids.map((id) => keys.body(id)));
  return found.map((value) => value ?? undefined);
}
