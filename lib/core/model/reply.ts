import type { DeadLetterReason, ErrorRecord } from './dead-letter.js';

/**
 * What a `send()` caller receives when its task failed for good (dead-lettered): the handler's error as
 * a record (name, message, code, the `RpcException` payload as `data`), which task and which run. The
 * stack is left out unless the worker's `sendErrorStack` option says otherwise.
 */
export interface ReplyError extends ErrorRecord {
  readonly taskId: string;
  readonly pattern: string;
  /** The run that failed (1-based); 0 when the task never ran (expired, interrupted). */
  readonly attempt: number;
  /** Why the task ended in dead letters. */
  readonly reason: DeadLetterReason;
}

/**
 * What a reply to a `send()` caller carries: published on the caller's reply channel and stored under
 * the task's result key, as JSON. Exactly one of `response` (success, `null` for no result) and `err`.
 */
export interface ReplyMessage {
  readonly id: string;
  readonly response?: unknown;
  /** A `ReplyError` (from workers of this release; older ones sent Nest's filter output as it was). */
  readonly err?: unknown;
}

/** The caller's copy of an error record: no stack unless asked, with the task's id, pattern, attempt and reason. */
export function replyErrorOf(
  record: ErrorRecord,
  about: {
    readonly taskId: string;
    readonly pattern: string;
    readonly attempt: number;
    readonly reason: DeadLetterReason;
  },
  withStack: boolean,
): ReplyError {
  const { stack, ...rest } = record;
  return { ...rest, ...(withStack && stack !== undefined ? { stack } : {}), ...about };
}

/** True for an error record sent by a worker of this release (as opposed to an older worker's raw filter output). */
export function isReplyError(value: unknown): value is ReplyError {
  if (typeof value !== 'object' || value === null) return false;
  const record = value as Record<string, unknown>;
  return (
    typeof record.name === 'string' &&
    typeof record.message === 'string' &&
    typeof record.taskId === 'string' &&
    typeof record.attempt === 'number'
  );
}
