import { RedisFullError, RedisPermissionError, RedisUnavailableError } from '../model/errors.js';
import { isRedisFull, permissionRefusal } from '../redis/refusals.js';
import { describeServer, RefusedError, watchOf, type RedisTaskConnection } from '../redis/connection.js';

/** Resolves true once the connection is ready, false if it ended or its caller gave up first (no timer held). */
export { answered } from '../redis/connection.js';
import type { RedisConnection } from '../redis/scripts.js';

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

/** The error of an admin call that got no answer in time (nothing was changed). */
export function unanswered(connection: RedisTaskConnection, timeoutMs: number, why: string): RedisUnavailableError {
  return new RedisUnavailableError('', describeServer(connection), timeoutMs, false, why);
}

/**
 * One call within `timeoutMs`, connecting included (`work` gets the deadline): past it,
 * `RedisUnavailableError` saying `<what> got no answer in time`, also when Redis went away while the call's
 * commands were under way. A dashboard, a health check, a metrics scrape or a cancel must answer while Redis
 * is down, instead of waiting on ioredis's retries.
 */
export async function answeredWithin<T>(
  connection: RedisTaskConnection,
  timeoutMs: number,
  what: string,
  work: (deadline: number) => Promise<T>,
): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(unanswered(connection, timeoutMs, `${what} got no answer in time`)), timeoutMs);
  });
  try {
    return await Promise.race([late, work(Date.now() + timeoutMs)]);
  } finally {
    clearTimeout(timer);
  }
}
