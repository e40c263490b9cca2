import { RedisUnavailableError } from '../model/errors.js';
import { answeringBy, refusedAs } from '../redis/answering.js';
import { describeServer, type RedisTaskConnection } from '../redis/connection.js';
import type { RedisConnection } from '../redis/scripts.js';
import { scrubRedisError } from '../support/redact.js';

/** Where a producer call goes, and how long it may take (its client's `enqueueTimeoutMs`). */
export interface CallTarget {
  readonly connection: RedisTaskConnection;
  readonly prefix: string;
  readonly timeoutMs: number;
}

/**
 * A producer call of several commands (`flow()`, a batch's `add` and `seal`) answered within the client's
 * `enqueueTimeoutMs`, as an emit is: `connect` and the wait for a connection that is down count against
 * that one deadline, and past it the call rejects with `RedisUnavailableError` — `written: false` while no
 * command was sent (once the caller was told so, none is sent after), `'unknown'` once one was (then `retry`
 * says how to make it again safely). An ACL refusal and a full Redis are told as `RedisPermissionError` and
 * `RedisFullError`; no error carries the commands' arguments. Without it such a call waited on ioredis's retries as long as Redis was down.
 */
export async function callWithin<T>(
  target: CallTarget,
  what: string,
  connect: () => Promise<RedisConnection>,
  work: () => Promise<T>,
  retry = '',
): Promise<T> {
  const { connection, timeoutMs } = target;
  const deadline = Date.now() + timeoutMs;
  let sent = false;
  let gaveUp = false;
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      gaveUp = true;
      const why = sent ? `${what} got no answer in time${retry ? ` (${retry})` : ''}` : `${what} could not reach Redis`;
      reject(new RedisUnavailableError('', describeServer(connection), timeoutMs, sent ? 'unknown' : false, why));
    }, timeoutMs);
  });
  const call = (async () => {
    const redis = await connect();
    await answeringBy(redis, connection, deadline, timeoutMs, what);
    if (gaveUp) return late;
    sent = true;
    return work();
  })();
  call.catch(() => undefined); // settled after the caller was answered: nothing more to tell
  try {
    return await Promise.race([late, call]);
  } catch (error) {
    // Without the command arguments ioredis attaches (a payload, a password): as every error of ours.
    throw refusedAs(scrubRedisError(error), target.prefix, connection);
  } finally {
    clearTimeout(timer);
  }
}

/** What a client's calls of several commands go through (see callWithin). */
export type CallsWithin = <T>(what: string, work: () => Promise<T>, retry?: string) => Promise<T>;

/** A client's calls within its `enqueueTimeoutMs` (see callWithin), its options read at each call. */
export function callsWithin(
  options: () => {
    readonly connection: RedisTaskConnection;
    readonly prefix: string;
    readonly enqueueTimeoutMs: number;
  },
  connect: () => Promise<RedisConnection>,
): CallsWithin {
  return (what, work, retry) => {
    const { connection, prefix, enqueueTimeoutMs } = options();
    return callWithin({ connection, prefix, timeoutMs: enqueueTimeoutMs }, what, connect, work, retry);
  };
}
