import { WorkerIdInUseError } from '../model/errors.js';
import type { QueueKeys } from '../redis/keys.js';
import type { TaskRedis } from '../redis/scripts.js';
import { sleep, type TaskLogger } from '../support/logger.js';

/**
 * Which shards hold a registration of this worker id (a previous run to resume). A registration whose
 * lease has not expired may be a run that died moments ago, or a live process given the same id: the
 * heartbeat tells them apart. It is watched for two of this worker's heartbeat intervals (no longer than
 * the lease): if it advances, that process is alive and this one is refused (its tasks would run twice);
 * if not, the previous run stopped without closing and its tasks are resumed.
 */
export async function previousRuns(
  redis: TaskRedis,
  shards: readonly QueueKeys[],
  workerId: string,
  heartbeatIntervalMs: number,
  logger: TaskLogger,
): Promise<boolean[]> {
  const read = () =>
    Promise.all(
      shards.map(async (keys) => {
        const [lease, beat] = await Promise.all([
          redis.zscore(keys.workers, workerId),
          redis.hget(keys.heartbeats, workerId),
        ]);
        return { keys, lease: lease === null ? undefined : Number(lease), beat };
      }),
    );
  const first = await read();
  const [seconds, micros] = await redis.time();
  const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
  const live = first.filter((shard) => shard.lease !== undefined && shard.lease > now);
  if (live.length > 0) {
    const watchMs = Math.min(
      2 * heartbeatIntervalMs + 100,
      Math.max(...live.map((shard) => shard.lease as number)) - now,
    );
    const lastBeat = Math.max(...live.map((shard) => Number(shard.beat ?? 0)));
    logger.log(
      `worker id ${workerId} holds an unexpired lease on "${live[0].keys.queue}" (last heartbeat ${lastBeat > 0 ? `${now - lastBeat} ms ago` : 'unknown'}): ` +
        `watching its heartbeat for up to ${watchMs} ms to tell a previous run that stopped without closing from a live worker with the same id`,
    );
    const until = Date.now() + watchMs;
    const step = Math.max(10, Math.min(250, Math.floor(heartbeatIntervalMs / 4)));
    while (Date.now() < until) {
      await sleep(Math.min(step, Math.max(0, until - Date.now())));
      const beats = await Promise.all(live.map((shard) => redis.hget(shard.keys.heartbeats, workerId)));
      const advanced = live.find((shard, index) => beats[index] !== null && beats[index] !== shard.beat);
      if (advanced)
        throw new WorkerIdInUseError(workerId, advanced.keys.queue, watchMs - Math.max(0, until - Date.now()));
      if (beats.every((beat) => beat === null)) break; // it closed meanwhile (deregistered)
    }
  }
  return first.map((shard) => shard.lease !== undefined);
}
