import { RedisFullError, RedisPermissionError, RedisUnavailableError } from '../model/errors.js';
import { isRedisFull, permissionRefusal } from './refusals.js';
import { describeServer, RefusedError, watchOf, type RedisTaskConnection } from './connection.js';
import type { RedisConnection } from './scripts.js';

/**
 * Resolves once `redis` answers, by `deadline` (ms since the epoch); past it, `RedisUnavailableError`
 * (nothing was sent). What the admin API and the dashboard wait on, so that they answer in time while
 * Redis is unreachable instead of waiting on ioredis's retries.
 */
export async function answeringBy(
  redis: RedisConnection,
  connection: RedisTaskConnection,
  deadline: number,
  timeoutMs: number,
  what: string,
): Promise<void> {
  if (redis.status === 'ready') return;
  try {
    await watchOf(redis).whenReady(Math.max(0, deadline - Date.now()), { refusedForMs: timeoutMs });
  } catch (error) {
    const refused = error instanceof RefusedError;
    throw new RedisUnavailableError(
      '',
      describeServer(connection),
      timeoutMs,
      false,
      `${what} could not reach Redis`,
      refused,
    );
  }
}

/**
 * What an admin call's error becomes: an ACL refusal a `RedisPermissionError` naming the command, a full
 * Redis a `RedisFullError`; any other error as it is.
 */
export function refusedAs(error: unknown, prefix: string, connection: RedisTaskConnection): unknown {
  const refused = permissionRefusal(error);
  if (refused) return new RedisPermissionError(prefix, refused.reply, refused.command);
  if (isRedisFull(error)) return new RedisFullError('', describeServer(connection));
  return error;
}
