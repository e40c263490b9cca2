import { answeringBy } from '../core/admin/readiness.js';
import type { TaskAdminRedis } from '../core/admin/admin.js';
import type { RedisTaskClient } from './redis-task.client.js';

/**
 * The client's connection with this package's scripts on it, for the library's own parts (admin, reaper,
 * dashboard, health). `connect()` types it as the plain ioredis connection users see.
 */
export async function connectedRedis(client: RedisTaskClient): Promise<TaskAdminRedis> {
  return (await client.connect()) as TaskAdminRedis;
}

/**
 * A client's connection once Redis answers, by `deadline`; past it, `RedisUnavailableError` (nothing was
 * sent). What the admin API and the dashboard wait on, so that they answer in time while Redis is
 * unreachable instead of waiting on ioredis's retries.
 */
export async function readyBy(client: RedisTaskClient, deadline: number, what: string): Promise<TaskAdminRedis> {
  const redis = await connectedRedis(client);
  await answeringBy(redis, client.options.connection, deadline, client.options.enqueueTimeoutMs, what);
  return redis;
}
