import { RedisUnavailableError } from '../model/errors.js';
import { describeServer, type RedisTaskConnection } from '../redis/connection.js';

/** Resolves true once the connection is ready, false if it ended or its caller gave up first (no timer held). */
export { answered } from '../redis/connection.js';
/** Waiting for a connection by a deadline, and what a refusal becomes (in the Redis layer: producers use them too). */
export { answeringBy, refusedAs } from '../redis/answering.js';

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
