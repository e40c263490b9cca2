import { ResultTooLargeError, UnserializableResultError } from '../model/errors.js';
import { errorMessage, type TaskLogger } from '../support/logger.js';

/** What a reply's error names, besides the error's own fields: which task, pattern and attempt. */
interface ReplyAbout {
  readonly taskId: string;
  readonly pattern: string;
  readonly attempt: number;
}

/**
 * The reply to a `send()` caller of a task whose handler succeeded, as JSON. The handler's work is done, so
 * the task completes whatever its result is; a result that cannot be sent becomes a typed error for the
 * caller instead (the task is not failed, and requeueing it would only run its side effects again):
 * larger than `maxResultBytes`, `ResultTooLargeError` (Redis holds and publishes a few hundred bytes);
 * not JSON (a BigInt, a circular object), `UnserializableResultError` naming where and what the value is.
 */
export function resultReply(
  about: ReplyAbout,
  response: unknown,
  maxResultBytes: number | undefined,
  logger: TaskLogger,
): string {
  let reply: string;
  try {
    reply = JSON.stringify({ id: about.taskId, response: response ?? null });
  } catch (error) {
    const detail = `${unserializableAt(response) ?? 'the result'}: ${errorMessage(error)}`;
    const failure = new UnserializableResultError(about.pattern, detail);
    logger.warn(
      `task ${about.taskId} of "${about.pattern}" completed; ${failure.message.replace('nestjs-redis-tasks: ', '')}`,
    );
    return errorReply(about, failure, { detail });
  }
  const limit = maxResultBytes ?? Number.POSITIVE_INFINITY;
  // Characters first: a string this short cannot be longer in bytes than 3 per character.
  if (reply.length * 3 <= limit) return reply;
  const bytes = Buffer.byteLength(reply);
  if (bytes <= limit) return reply;
  const failure = new ResultTooLargeError(about.pattern, about.taskId, bytes, limit);
  logger.warn(`task ${about.taskId} of "${about.pattern}": ${failure.message.replace('nestjs-redis-tasks: ', '')}`);
  return errorReply(about, failure, { bytes, limit });
}

function errorReply(about: ReplyAbout, error: Error & { code: string }, fields: Record<string, unknown>): string {
  const { name, code, message } = error;
  const { taskId, pattern, attempt } = about;
  // spread-ok: once per result that cannot be sent
  const err = { name, code, message, ...fields, taskId, pattern, attempt, reason: 'failed' };
  return JSON.stringify({ id: taskId, err });
}

/** Most values looked at when finding what in a result is not JSON (a bound on a huge result). */
const MAX_VISITS = 10_000;

/**
 * Where in a result the first value JSON cannot hold is (`result.items[3].total`, a BigInt; a circular
 * reference), or undefined when none is found within MAX_VISITS values. Never the value itself.
 */
export function unserializableAt(value: unknown): string | undefined {
  const seen = new Set<object>();
  let visits = 0;
  const walk = (current: unknown, path: string): string | undefined => {
    if (++visits > MAX_VISITS) return undefined;
    if (typeof current === 'bigint') return `${path} (a BigInt)`;
    if (typeof current !== 'object' || current === null) return undefined;
    if (seen.has(current)) return `${path} (a circular reference)`;
    if (typeof (current as { toJSON?: unknown }).toJSON === 'function') return undefined;
    seen.add(current);
    const entries = Array.isArray(current)
      ? current.map((item, index) => [`${path}[${index}]`, item] as const)
      : Object.entries(current).map(
          ([key, item]) =>
            [/^[A-Za-z_$][\w$]*$/.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`, item] as const,
        );
    for (const [where, item] of entries) {
      const found = walk(item, where);
      if (found) return found;
    }
    seen.delete(current);
    return undefined;
  };
  try {
    return walk(value, 'result');
  } catch {
    return undefined;
  }
}
