import { RedisUnavailableError } from '../core/model/errors.js';
import { describeServer, watchOf } from '../core/redis/connection.js';
import type { TaskRedis } from '../core/redis/scripts.js';
import type { RedisTaskClient } from './redis-task.client.js';

/**
 * The client's connection with this package's scripts on it, for the library's own parts (admin, reaper,
 * dashboard, health). `connect()` types it as the plain ioredis connection users see.
 */
export async function connectedRedis(client: RedisTaskClient): Promise<TaskRedis> {
  return (await client.connect()) as TaskRedis;
}

/**
 * A client's connection once Redis answers, by `deadline`; past it, `RedisUnavailableError` (nothing was
 * sent). What the admin API and the dashboard wait on, so that they answer in time while Redis is
 * unreachable instead of waiting on ioredis's retries.
 */
export async function readyBy(client: RedisTaskClient, deadline: number, what: string): Promise<TaskRedis> {
  const redis = await connectedRedis(client);
  if (redis.status === 'ready') return redis;
  try {
    await watchOf(redis).whenReady(Math.max(0, deadline - Date.now()));
  } catch {
    throw new RedisUnavailableError('', describeServer(client.options.connection), client.options.enqueueTimeoutMs, false, `${what} could not reach Redis`);
  }
  return redis;
}
