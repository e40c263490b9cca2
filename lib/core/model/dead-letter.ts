import type { FlowParentResult } from './flow.js';
/**
 * Why a task ended in dead letters: `malformed` (not a task we can decode), `unsupported-version` (a
 * well-formed entry of another version of the stored form, see `FORMAT_VERSION`), `failed` (its handler
 * threw on the last allowed attempt, or threw a non-retryable error), `timeout` (its last allowed run
 * passed `handlerTimeoutMs`), `interrupted` (its allowed attempts were used up by runs that never
 * finished: the worker died, lost its lease, or shut down after the run had gone on past `slowRunMs`),
 * `expired` (its expiry time passed before a worker could start it), `rejected` (its handler sent it there:
 * `ctx.deadLetter(reason)` or `DeadLetterTaskError`; the handler's reason is the record's `detail`).
 */
export const DEAD_LETTER_REASONS = [
  'failed',
  'timeout',
  'interrupted',
  'expired',
  'malformed',
  'unsupported-version',
  'rejected',
] as const;
export type DeadLetterReason = (typeof DEAD_LETTER_REASONS)[number];

/** A plain-data description of an error, safe to store and to send back to a `send()` caller. */
export interface ErrorRecord {
  /** The error's class name (`name`), e.g. `RangeError`, `RpcException`, or the name a class set. */
  readonly name: string;
  readonly message: string;
  /** The error's own `code`, when it has a string or number one (kept as a string). */
  readonly code?: string;
  /**
   * What the error carries for its caller: an `RpcException`'s `getError()` (Nest's convention), or a
   * thrown plain object (what a user's exception filter emits), as JSON (capped, see MAX_ERROR_DATA).
   */
  readonly data?: unknown;
  /** The first lines of the stack, enough to find the throwing frame (never sent to a caller unless asked). */
  readonly stack?: string;
}

/** What the dead-letter list holds for each task (JSON). */
export interface DeadLetterRecord {
  readonly id?: string;
  readonly pattern: string;
  readonly clientId?: string;
  readonly reason: DeadLetterReason;
  /** Why, in words (for `malformed`: what was wrong with the entry). */
  readonly detail?: string;
  readonly error?: ErrorRecord;
  /** Runs started, this one included. */
  readonly attempts: number;
  readonly enqueuedAt?: number;
  readonly deadAt: number;
  readonly workerId: string;
  readonly payload?: unknown;
  /** The task's priority, kept when it is requeued. */
  readonly priority?: number;
  /** The entry as found in Redis, kept only when it could not be decoded. */
  readonly raw?: string;
  /** The producer's trace context (OpenTelemetry), kept so a requeued task stays in its trace. */
  /** The batch the task belonged to (a requeued dead letter stays in it). */
  readonly batch?: string;
  /** The flow the task was a node of, its node id and its parents' outcomes (a requeued dead letter stays in it). */
  readonly flow?: string;
  readonly node?: string;
  /** 1 when the task was tracked (its index, `getTaskStatus`): a requeued dead letter is tracked again, from its index. */
  readonly track?: 1;
  /** 1 when the node's flow is on one Redis server: its settles apply in their own scripts (include/flow.lua). */
  readonly fold?: 1;
  readonly parents?: Readonly<Record<string, FlowParentResult>>;
  readonly traceparent?: string;
  readonly tracestate?: string;
}

const STACK_LINES = 6;
/** Longest message, and longest stack line, kept in an error record (characters). */
export const MAX_ERROR_MESSAGE = 4_096;
const MAX_STACK_LINE = 512;

/**
 * A plain-data record of anything a handler threw: an Error, a string, a BigInt, a circular object, a
 * Proxy whose traps throw. Never throws itself, and caps what it keeps, so whatever was thrown follows
 * the normal retry and dead-letter path (and can be stored as JSON).
 */
export function toErrorRecord(error: unknown): ErrorRecord {
  try {
    if (error instanceof Error) {
      const stack = typeof error.stack === 'string' ? error.stack : undefined;
      const data = payloadOf(error);
      return {
        name: cap(classNameOf(error), 200),
        message: cap(safeString(error.message, ''), MAX_ERROR_MESSAGE),
        // An RpcException({ code, message }) says its code in its payload.
        ...(codeOf(error).code === undefined && typeof data === 'object' && data !== null
          ? codeOf(data)
          : codeOf(error)),
        ...(data === undefined ? {} : { data }),
        ...(stack
          ? {
              stack: stack
                .split('\n')
                .slice(0, STACK_LINES)
                .map((line) => cap(line, MAX_STACK_LINE))
                .join('\n'),
            }
          : {}),
      };
    }
    if (typeof error === 'object' && error !== null) {
      // A thrown plain object (or what an exception filter emitted, `{ status, message }`): kept as data.
      const record = error as { message?: unknown; name?: unknown };
      const data = asData(error);
      return {
        name: cap(safeString(record.name, 'Error'), 200),
        message: cap(
          record.message === undefined ? describeThrown(error) : describeThrown(record.message),
          MAX_ERROR_MESSAGE,
        ),
        ...codeOf(error),
        ...(data === undefined ? {} : { data }),
      };
    }
    // A thrown string is its own message; any other value (undefined, null, a number) says what it was.
    const message =
      typeof error === 'string' ? error : `the handler threw a non-Error value (${describeThrown(error)})`;
    return { name: 'Error', message: cap(message, MAX_ERROR_MESSAGE) };
  } catch (failure) {
    // A value whose every look throws (a hostile Proxy): say so rather than fail the task's settle.
    return { name: 'Error', message: `a value that cannot be described was thrown (${describeThrown(failure)})` };
  }
}

/**
 * What a handler threw, made safe to look at: the value itself when its prototype and the fields this
 * library reads can be read without throwing, else an Error saying what it was. Every later touch (an
 * `instanceof`, a `code`, a `message`) then cannot throw: a hostile value (a Proxy whose traps throw) once
 * made a task loop for ever, its settle failing before the attempt was counted.
 */
export function inspectableThrown(value: unknown): unknown {
  if ((typeof value !== 'object' && typeof value !== 'function') || value === null) return value;
  try {
    Object.getPrototypeOf(value);
    const fields = value as Record<string, unknown>;
    for (const field of ['name', 'message', 'code', 'stack', 'data', 'delayMs', 'cause', 'constructor'])
      void fields[field];
    return value;
  } catch (error) {
    return new Error(
      `the handler threw a value that cannot be inspected (${describeThrown(value)}; reading it threw ${describeThrown(safeMessage(error))})`,
    );
  }
}

function safeMessage(error: unknown): unknown {
  try {
    return error instanceof Error ? error.message : error;
  } catch {
    return 'a hostile value';
  }
}

/** Text for any value: strings as they are, everything else as JSON where it can be, else its type. */
export function describeThrown(value: unknown): string {
  try {
    if (typeof value === 'string') return value;
    if (typeof value === 'bigint') return `${value.toString()}n`;
    if (typeof value === 'symbol' || typeof value === 'function') return String(value);
    const json = JSON.stringify(value, (_key, inner: unknown) =>
      typeof inner === 'bigint' ? `${inner.toString()}n` : inner,
    );
    return json ?? String(value);
  } catch {
    try {
      const tag = Object.prototype.toString.call(value);
      return `${tag} (not serializable: circular or hostile)`;
    } catch {
      return 'a value that cannot be described';
    }
  }
}

/** Largest `data` kept in an error record (characters of JSON); a larger one is replaced by a note. */
export const MAX_ERROR_DATA = 16_384;

/** `name`, or the class's own name where a subclass left `name` as `Error` (Nest's `RpcException` does). */
function classNameOf(error: Error): string {
  const name = safeString(error.name, 'Error');
  if (name !== 'Error') return name;
  const constructorName = (error.constructor as { name?: unknown } | undefined)?.name;
  return typeof constructorName === 'string' && constructorName !== '' ? constructorName : name;
}

function codeOf(error: object): { code?: string } {
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' && code !== '') return { code: cap(code, 200) };
  if (typeof code === 'number' && Number.isFinite(code)) return { code: String(code) };
  return {};
}

/** An `RpcException`'s payload (`getError()`), found by shape so that any copy of Nest is recognised. */
function payloadOf(error: Error): unknown {
  const getError = (error as { getError?: unknown }).getError;
  if (typeof getError !== 'function') return undefined;
  return asData(getError.call(error));
}

/** `value` as plain JSON data when it is one and small enough, else a note saying why not. */
function asData(value: unknown): unknown {
  if (value === undefined) return undefined;
  let json: string | undefined;
  try {
    json = JSON.stringify(value);
  } catch {
    return `${describeThrown(value)}`;
  }
  if (json === undefined) return undefined;
  if (json.length > MAX_ERROR_DATA)
    return `(${json.length} characters of error data, over ${MAX_ERROR_DATA}: not kept)`;
  return JSON.parse(json) as unknown;
}

function safeString(value: unknown, fallback: string): string {
  return typeof value === 'string' ? value : value === undefined || value === null ? fallback : describeThrown(value);
}

/**
 * A text of a dead-letter record (the handler's `detail`, a message) cut at `limit` characters: the one cap
 * for every path into a record (`ctx.deadLetter()` refuses longer reasons; a thrown `DeadLetterTaskError`
 * cannot be refused, so its message is cut here).
 */
export function capText(text: string, limit = MAX_ERROR_MESSAGE): string {
  return cap(text, limit);
}

function cap(text: string, limit: number): string {
  return text.length > limit ? `${text.slice(0, limit)}… (${text.length - limit} more characters)` : text;
}

/** The error of a task dead-lettered before it ran (no handler threw): what its dead letter and its caller get. */
export function notRunError(reason: 'interrupted' | 'expired' | 'malformed', detail: string): ErrorRecord {
  return reason === 'interrupted'
    ? { name: 'InterruptedError', code: 'TASK_INTERRUPTED', message: detail }
    : reason === 'expired'
      ? { name: 'ExpiredError', code: 'TASK_EXPIRED', message: detail }
      : { name: 'PayloadLostError', code: 'PAYLOAD_LOST', message: detail };
}

/** Most of an undecodable entry kept in its dead letter (characters); the rest is counted, not stored. */
export const MAX_RAW_IN_DEAD_LETTER = 65_536;

/** At most MAX_RAW_IN_DEAD_LETTER characters of an undecodable entry, saying how much was left out. */
export function capRaw(raw: string): string {
  return raw.length > MAX_RAW_IN_DEAD_LETTER
    ? `${raw.slice(0, MAX_RAW_IN_DEAD_LETTER)}… (${raw.length - MAX_RAW_IN_DEAD_LETTER} more characters not kept)`
    : raw;
}

/** Why an entry that cannot be run is dead-lettered: another format version, or not a task at all. */
export function undecodableReason(failure: { readonly version?: number }): 'malformed' | 'unsupported-version' {
  return failure.version === undefined ? 'malformed' : 'unsupported-version';
}

/** The record of an entry that cannot be decoded: kept for inspection (capped), never run. */
export function undecodableRecord(
  pattern: string,
  raw: string,
  failure: { readonly reason: string; readonly version?: number },
  workerId: string,
  id: string | undefined,
): DeadLetterRecord {
  return {
    id,
    pattern,
    reason: undecodableReason(failure),
    detail: failure.reason,
    attempts: 0,
    deadAt: Date.now(),
    workerId,
    raw: capRaw(raw),
  };
}
