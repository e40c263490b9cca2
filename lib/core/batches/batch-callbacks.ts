import { BATCH_DEFAULT_KEEP_MS, type BatchFire, type BatchSummary } from '../model/batch.js';
import { enqueueAnswer, gatewayOf } from '../redis/gateway.js';
import type { PrefixKeys } from '../redis/keys.js';
import type { QueueLayouts } from '../redis/layouts.js';
import type { TaskRedis } from '../redis/scripts.js';
import { prepareTask } from '../producer/task-items.js';

/** How long a callback's deduplication key holds (ms): far past any re-fire (they stop once the callbacks are on record). */
const CALLBACK_GUARD_MS = 7 * BATCH_DEFAULT_KEEP_MS;
/** The longest wait for Redis per callback enqueue (ms). */
const CALLBACK_TIMEOUT_MS = 10_000;

/**
 * Enqueues a completed batch's callbacks, exactly once however often it is called (by the seal, by reapers
 * folding events at once, again after a crash): each callback has a fixed task id and a deduplication key
 * that no settle frees (it is not in the task's envelope), kept a week. Then records them on the batch (no
 * reaper enqueues them again; the record expires `keep` ms later) and drops the batch from the due index.
 * Returns the callback task ids.
 */
export async function enqueueCallbacks(
  redis: TaskRedis,
  keys: PrefixKeys,
  layouts: QueueLayouts,
  id: string,
  fire: BatchFire,
): Promise<string[]> {
  const gateway = gatewayOf(redis);
  const summary: BatchSummary = {
    batchId: id,
    total: fire.total,
    succeeded: fire.succeeded,
    failed: fire.dead,
    cancelled: fire.cancelled,
    failedIds: fire.failedIds,
  };
  const ids: string[] = [];
  for (const [which, callback] of [
    ['complete', fire.complete],
    ['success', fire.success],
  ] as const) {
    if (!callback) continue;
    const taskId = `batch.${id}.${which}`;
    const payload = callback.payload === undefined ? summary : { ...summary, payload: callback.payload };
    // A task of its batch too: its settle starts the countdown of the batch's record (foldBatch-2.lua).
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
    const guarded = { ...task, deduplicationKey: `batch:${id}:${which}`, deduplicationTtlMs: CALLBACK_GUARD_MS };
    enqueueAnswer(
      await gateway.enqueue(shard, {
        deadline: Date.now() + CALLBACK_TIMEOUT_MS,
        timeoutMs: CALLBACK_TIMEOUT_MS,
        batches: [{ tasks: [guarded] }],
      }),
    );
    ids.push(taskId);
  }
  // Counted for metrics by whichever call recorded them (a crash between loses one count).
  if (await gateway.batch.close(keys.batch(id), ids)) await redis.hincrby(keys.batchCounters, 'completed', 1);
  await redis.zrem(keys.batchesDue, id);
  return ids;
}
