import {
  BATCH_DEFAULT_KEEP_MS,
  callbackGuard,
  callbackKindOf,
  callbackTaskId,
  type BatchSummary,
} from '../model/batch.js';
import { DECIDED_ENQUEUE_MS, SETTLED_GUARD_MS } from '../redis/call-record.js';
import { enqueueAnswer } from '../redis/gateway.js';
import type { BatchFireAnswer } from '../redis/batch-gateway.js';
import type { TaskStore } from '../redis/store.js';
import type { QueueKeys } from '../redis/keys.js';
import { prepareTask } from '../producer/task-items.js';

/**
 * How long a callback's deduplication key holds at most (ms): far past any re-fire (they stop once the
 * callbacks are on record). It goes sooner: `SETTLED_GUARD_MS` after its callback settled (see BatchFolder).
 */
const CALLBACK_GUARD_MS = 7 * BATCH_DEFAULT_KEEP_MS;
/** How long a batch count's marker lives at most (ms): past any resend of the count. */
export const COUNT_MARKER_MS = 600_000;

/**
 * Enqueues a completed batch's callbacks, exactly once however often it is called (by the seal, by reapers
 * folding events at once, again after a crash): each callback has a fixed task id and a deduplication key
 * of its batch's generation that no settle frees (it is not in the task's envelope). Then records them on
 * the batch (no reaper enqueues them again; its keys expire `keep` ms after every callback settled), lets
 * the guards of callbacks that settled already go (the others' when their settle is folded), and drops the
 * batch from the due index. Returns the callback task ids.
 *
 * `fire.asked` is when the script that answered `fire` was sent: the enqueues go under a deadline
 * `DECIDED_ENQUEUE_MS` from then, and none lands later (one that waited out an outage writes nothing), so a
 * settled callback's guard, kept `SETTLED_GUARD_MS` once the callbacks are on record, refuses every enqueue
 * of it from a process that decided before: a callback that ran and settled is never enqueued again.
 */
export async function enqueueCallbacks(store: TaskStore, id: string, fire: BatchFireAnswer): Promise<string[]> {
  const deadline = fire.asked + DECIDED_ENQUEUE_MS;
  const { redis, keys, layouts, gateway } = store;
  const summary = summaryOf(id, fire);
  const ids: string[] = [];
  // table-ok: lives for one call (at most two callbacks)
  const guards = new Map<string, { shard: QueueKeys; guard: string }>();
  for (const [which, callback] of [
    ['complete', fire.complete],
    ['success', fire.success],
  ] as const) {
    if (!callback) continue;
    const taskId = callbackTaskId(id, which);
    const payload = callback.payload === undefined ? summary : { ...summary, payload: callback.payload };
    // A task of its batch too: its settle starts the countdown of the batch's record (foldBatch-3.lua).
    const task = prepareTask(
      { payload, clientId: callback.clientId ?? 'default', id: taskId, batch: id },
      Date.now(),
      undefined,
      {
        maxPayloadBytes: Number.MAX_SAFE_INTEGER,
        deduplicationTtlMs: CALLBACK_GUARD_MS,
      },
    );
    const shard = (await layouts.layout(callback.pattern)).shardOf(task.clientId);
    const guard = callbackGuard(id, fire.created, which);
    const guarded = { ...task, deduplicationKey: guard, deduplicationTtlMs: CALLBACK_GUARD_MS };
    guards.set(taskId, { shard, guard });
    enqueueAnswer(
      await gateway.enqueue(shard, {
        deadline,
        timeoutMs: DECIDED_ENQUEUE_MS,
        batches: [{ tasks: [guarded] }],
      }),
    );
    ids.push(taskId);
  }
  const closed = await gateway.batch.close(keys.batch(id), ids);
  // Counted for metrics by whichever call recorded them, under a marker of the batch's generation that a
  // resend finds (a crash between loses one count).
  if (closed.recorded) {
    const marker = keys.batchCounted(id, fire.created, 'c');
    // Gone with the batch's keys at the latest (its `keep` after its callbacks settled).
    const keep = Number(await redis.hget(keys.batch(id).record, 'keep')) || COUNT_MARKER_MS;
    await gateway.batch.count(keys.batchCounters, marker, 'completed', Math.min(keep, COUNT_MARKER_MS));
  }
  for (const settled of closed.settled) {
    const held = guards.get(settled);
    if (held && callbackKindOf(id, settled)) await redis.pexpire(held.shard.dedup(held.guard), SETTLED_GUARD_MS);
  }
  await redis.zrem(keys.batchesDue, id);
  return ids;
}

/** What a batch's callbacks are told (their payload, with the callback's own as `payload`). */
function summaryOf(id: string, fire: BatchFireAnswer): BatchSummary {
  return {
    batchId: id,
    total: fire.total,
    succeeded: fire.succeeded,
    failed: fire.dead,
    cancelled: fire.cancelled,
    failedIds: fire.failedIds,
  };
}
