import { ReplicationTimeoutError } from '../model/errors.js';
import type { QueueKeys, QueueLayout } from '../redis/keys.js';
import { enqueueRecorded, outboxRecordId, shortenRecords } from '../redis/outbox-gateway.js';
import type { TaskRedis } from '../redis/scripts.js';
import type { ProducerOptions } from './producer-types.js';

/** One outbox row's task as the relay hands it to Redis: enqueued under a call record named for the task. */
export interface RelayedTask {
  readonly taskId: string;
  readonly shardKey: string;
  readonly fields: readonly (string | number)[];
}

/** The tasks of each shard of the layout (a task's shard key picks it, as at emit). */
function byShard(layout: QueueLayout, tasks: readonly RelayedTask[]): Map<QueueKeys, RelayedTask[]> {
  // table-ok: lives for one relay
  const shards = new Map<QueueKeys, RelayedTask[]>();
  for (const task of tasks) {
    const shard = layout.shardOf(task.shardKey);
    const list = shards.get(shard);
    if (list) list.push(task);
    else shards.set(shard, [task]);
  }
  return shards;
}

/**
 * Enqueues relayed tasks, one pipeline per shard, each task under its own call record; fails (the relay
 * rolls back, the rows wait) when Redis does not answer within enqueueTimeoutMs or, with durability, too
 * few replicas confirm.
 */
export async function relayTasks(
  redis: TaskRedis,
  layout: QueueLayout,
  tasks: readonly RelayedTask[],
  recordMs: number,
  options: Pick<ProducerOptions, 'durability' | 'enqueueTimeoutMs'>,
): Promise<void> {
  const durability = options.durability;
  await Promise.all(
    [...byShard(layout, tasks)].map(async ([shard, shardTasks]) => {
      const calls = shardTasks.map((task) => ({ recordId: outboxRecordId(task.taskId), fields: task.fields }));
      let timer: NodeJS.Timeout | undefined;
      const acknowledged = await Promise.race([
        enqueueRecorded(redis, shard, calls, recordMs, durability),
        new Promise<never>((_, reject) => {
          timer = setTimeout(
            () =>
              reject(
                new Error(`Redis did not answer the relay of "${shard.queue}" within ${options.enqueueTimeoutMs} ms`),
              ),
            options.enqueueTimeoutMs,
          );
        }),
      ]).finally(() => clearTimeout(timer));
      if (durability && acknowledged < durability.replicas) {
        throw new ReplicationTimeoutError(
          shard.queue,
          acknowledged,
          durability.replicas,
          durability.timeoutMs,
          shardTasks.map((task) => task.taskId),
        );
      }
    }),
  );
}

/** Shortens the records of tasks whose rows are deleted for good (best effort). */
export function relayedTasks(redis: TaskRedis, layout: QueueLayout, tasks: readonly RelayedTask[]): void {
  for (const [shard, shardTasks] of byShard(layout, tasks)) {
    shortenRecords(
      redis,
      shard,
      shardTasks.map((task) => outboxRecordId(task.taskId)),
    );
  }
}
