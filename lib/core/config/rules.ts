import { InvalidOptionError, InvalidTaskError } from '../model/errors.js';
import {
  backoffProblem,
  leaseExtensionProblem,
  maxAttemptsProblem,
  retryDelayProblem,
  type BackoffOptions,
  type RetryOptions,
} from '../model/retry-policy.js';
import { describe } from '../support/describe.js';
import { MAX_TRACK_MS, TRACK_DEFAULTS, type TrackOptions, type TrackTimes } from '../model/task-status.js';
import type { CoalesceOptions, CoalesceSettings } from '../model/coalesce.js';

/** Bounds of retry settings (the model's pure checks apply them). */
export { MAX_ATTEMPTS, MAX_BACKOFF_MS } from '../model/retry-policy.js';

/**
 * The rules every task must meet, in one place: the producer applies them to every item it enqueues,
 * whatever built it (the record builder, a hand-made `RedisTaskRecord`, a plain payload), and the
 * options use the same name rule. A rule returns why a value breaks it, or undefined.
 */

/** Longest client id, prefix or worker id (they are part of key names). */
export const MAX_NAME_LENGTH = 200;
/** Longest consumer group name. */
export const MAX_GROUP_LENGTH = 100;
/** Largest client weight. */
export const MAX_WEIGHT = 1_000;
/** Highest rate limit (tasks per second). */
export const MAX_RATE = 1_000_000;
/** Highest per-client concurrency cap. */
export const MAX_CLIENT_CONCURRENCY = 1_000_000;
/** Longest handler timeout (ms): a day. */
export const MAX_HANDLER_TIMEOUT_MS = 86_400_000;
/** Longest pattern (the queue name: part of every key of the queue). */
export const MAX_PATTERN_LENGTH = 512;
/** Highest priority. */
export const MAX_PRIORITY = 1_000_000;
/** Longest delay of a task: a year (a task due in 31,000 years is a bug, not a plan). */
export const MAX_DELAY_MS = 366 * 86_400_000;
/** Longest deduplication key. */
export const MAX_DEDUP_KEY_LENGTH = 512;
/** Most of an undecodable entry kept in its dead letter (a bound of the dead-letter record). */
export { MAX_RAW_IN_DEAD_LETTER } from '../model/dead-letter.js';

function hasControlCharacter(value: string): boolean {
  for (let i = 0; i < value.length; i++) {
    const code = value.charCodeAt(i);
    if (code < 32 || code === 127) return true;
  }
  return false;
}

/** A client id (also prefix, worker id): part of key names, so no braces, spaces or control characters. */
export function nameProblem(value: unknown): string | undefined {
  if (typeof value !== 'string' || value.length === 0 || value.length > MAX_NAME_LENGTH) {
    return `must be a non-empty string of at most ${MAX_NAME_LENGTH} characters`;
  }
  if (/[{}\s]/.test(value) || hasControlCharacter(value)) {
    return 'must not contain braces, spaces or control characters';
  }
  return undefined;
}

/** A consumer group name: part of key names, so no key separator (`:`), braces or spaces. */
export function groupProblem(value: unknown): string | undefined {
  if (typeof value !== 'string' || value.length === 0 || value.length > MAX_GROUP_LENGTH) {
    return `must be a non-empty string of at most ${MAX_GROUP_LENGTH} characters`;
  }
  return /[:{}\s]/.test(value) || hasControlCharacter(value)
    ? 'must not contain the key separator ":", braces, spaces or control characters'
    : undefined;
}

/** A rate limit: tasks per second, more than 0. */
export function rateProblem(value: unknown): string | undefined {
  return typeof value !== 'number' || !Number.isFinite(value) || value <= 0 || value > MAX_RATE
    ? `must be a number of tasks per second above 0 (at most ${MAX_RATE})`
    : undefined;
}

/** A claim weight of a client (1, the default, removes it). */
export function weightProblem(value: unknown): string | undefined {
  return typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > MAX_WEIGHT
    ? `must be an integer from 1 to ${MAX_WEIGHT}`
    : undefined;
}

/** A per-client cap on tasks in flight (0: none). */
export function clientConcurrencyProblem(value: unknown): string | undefined {
  return typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > MAX_CLIENT_CONCURRENCY
    ? `must be an integer from 0 to ${MAX_CLIENT_CONCURRENCY}`
    : undefined;
}

/** A handler timeout in ms (0: none). */
export function handlerTimeoutProblem(value: unknown): string | undefined {
  return typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > MAX_HANDLER_TIMEOUT_MS
    ? `must be an integer from 0 to ${MAX_HANDLER_TIMEOUT_MS}`
    : undefined;
}

/** A pattern: any string Nest can route, within a length. */
export function patternProblem(value: unknown): string | undefined {
  if (typeof value !== 'string' || value.length === 0 || value.length > MAX_PATTERN_LENGTH) {
    return `must be a non-empty string of at most ${MAX_PATTERN_LENGTH} characters`;
  }
  return hasControlCharacter(value) ? 'must not contain control characters' : undefined;
}

/**
 * The per-task settings, as what a value must be when it is not that (undefined when it is): the record
 * builder's setters word it "setX() needs <this>", the producer's gate "x must be <this>", so the two
 * can never disagree.
 */
export const taskRules = {
  priority: (value: unknown): string | undefined =>
    typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 && value <= MAX_PRIORITY
      ? undefined
      : `an integer from 0 to ${MAX_PRIORITY}`,
  delay: (value: unknown): string | undefined =>
    typeof value === 'number' && value >= 0 && value <= MAX_DELAY_MS
      ? undefined
      : `a non-negative number of milliseconds, at most ${MAX_DELAY_MS} (366 days)`,
  expiresIn: (value: unknown): string | undefined =>
    typeof value === 'number' && Number.isFinite(value) && value > 0 ? undefined : 'a positive number of milliseconds',
  time: (value: unknown): string | undefined =>
    typeof value === 'number' && Number.isFinite(value) ? undefined : 'a time (ms since the epoch)',
  deduplicationKey: (value: unknown): string | undefined =>
    typeof value === 'string' && value.length > 0 && value.length <= MAX_DEDUP_KEY_LENGTH
      ? undefined
      : `a string of 1 to ${MAX_DEDUP_KEY_LENGTH} characters`,
  deduplicationTtl: (value: unknown): string | undefined =>
    typeof value === 'number' && Number.isSafeInteger(value) && value >= 1
      ? undefined
      : 'a positive integer of milliseconds',
} as const;

/** Builds the error a broken rule throws, naming where (an option, a setter, a task field). */
export type MakeError = (where: string, message: string) => Error;

const optionError: MakeError = (where, message) => new InvalidOptionError(where, message);

/** Checks retry settings, throwing an error that names `where` (an option, a pattern, a setter). */
export function validateRetry(where: string, value: unknown, makeError = optionError): RetryOptions {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw makeError(where, `must be an object, got ${describe(value)}`);
  }
  const { maxAttempts, backoff } = value as Record<string, unknown>;
  if (maxAttempts !== undefined) validateMaxAttempts(`${where}.maxAttempts`, maxAttempts, makeError);
  if (backoff !== undefined) validateBackoff(`${where}.backoff`, backoff, makeError);
  return value as RetryOptions;
}

export function validateMaxAttempts(where: string, value: unknown, makeError = optionError): number {
  const found = maxAttemptsProblem(value);
  if (found) check(`${where}${found.field}`, found.value, found.problem, makeError);
  return value as number;
}

export function validateBackoff(where: string, value: unknown, makeError = optionError): BackoffOptions {
  const found = backoffProblem(value);
  if (found) check(`${where}${found.field}`, found.value, found.problem, makeError);
  return value as BackoffOptions;
}

/** Throws (an `InvalidOptionError` unless told otherwise) naming `option` when `problem` found one. */
function check(option: string, value: unknown, problem: string | undefined, makeError: MakeError = optionError): void {
  if (problem) throw makeError(option, `${problem}, got ${describe(value)}`);
}

/** A handler's request about its own run (`ctx.retry()` and the like): refused with an `InvalidTaskError`. */
const requestError: MakeError = (where, message) => new InvalidTaskError(`${where} ${message}`);

/** Longest reason a handler gives `ctx.deadLetter(reason)` (characters). */
export const MAX_DEAD_LETTER_REASON_LENGTH = 4_096;

export function validateRetryDelay(where: string, value: unknown): number {
  check(where, value, retryDelayProblem(value), requestError);
  return value as number;
}

export function validateLeaseExtension(where: string, value: unknown): number {
  check(where, value, leaseExtensionProblem(value), requestError);
  return value as number;
}

export function validateDeadLetterReason(where: string, value: unknown): string {
  const problem =
    typeof value !== 'string' || value.trim() === ''
      ? 'must be a non-empty string'
      : value.length > MAX_DEAD_LETTER_REASON_LENGTH
        ? `must be at most ${MAX_DEAD_LETTER_REASON_LENGTH} characters`
        : undefined;
  check(where, typeof value === 'string' ? `${value.length} characters` : value, problem, requestError);
  return value as string;
}

export function validateName(option: string, value: unknown): void {
  check(option, value, nameProblem(value));
}

/** A client id named by an operator (admin, CLI): a name, and not `*` (the every-client rate entry). */
export function validateClientId(option: string, value: unknown): void {
  check(option, value, value === '*' ? 'must be a client id, not "*"' : nameProblem(value));
}

export function validateGroup(option: string, value: unknown): void {
  check(option, value, groupProblem(value));
}

export function validateRate(option: string, value: unknown): void {
  check(option, value, rateProblem(value));
}

export function validateWeight(option: string, value: unknown): void {
  check(option, value, weightProblem(value));
}

export function validateClientConcurrency(option: string, value: unknown): void {
  check(option, value, clientConcurrencyProblem(value));
}

/**
 * A pattern's share of a worker's handler slots: 1 to the worker's `concurrency` (a larger one could never
 * be reached, and says the author expected more slots than there are).
 */
export function validatePatternConcurrency(option: string, value: unknown, concurrency: number): void {
  const problem =
    typeof value !== 'number' || !Number.isInteger(value) || value < 1
      ? "must be an integer from 1 to the worker's concurrency"
      : value > concurrency
        ? `is more than the worker's concurrency (${concurrency}), so it could never be reached: raise concurrency, or lower this`
        : undefined;
  check(option, value, problem);
}

export function validateHandlerTimeout(option: string, value: unknown): void {
  check(option, value, handlerTimeoutProblem(value));
}

/** Why a `track` value is not one (undefined when it is): true, false, or `{ keepMs?, liveMs? }`. */
export function trackProblem(value: unknown): string | undefined {
  if (typeof value === 'boolean') return undefined;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return `must be true, false or { keepMs?, liveMs? }, got ${describe(value)}`;
  }
  for (const [key, ms] of Object.entries(value)) {
    if (key !== 'keepMs' && key !== 'liveMs') return `has an unknown field "${key}" (known: keepMs, liveMs)`;
    if (ms === undefined) continue;
    if (typeof ms !== 'number' || !Number.isInteger(ms) || ms < 1 || ms > MAX_TRACK_MS) {
      return `.${key} must be an integer from 1 to ${MAX_TRACK_MS}, got ${describe(ms)}`;
    }
  }
  return undefined;
}

/** The index TTLs a checked `track` value stands for; undefined for false (not tracked). */
export function trackTimes(value: boolean | TrackOptions | undefined): TrackTimes | undefined {
  if (value === undefined || value === false) return undefined;
  if (value === true) return TRACK_DEFAULTS;
  return { keepMs: value.keepMs ?? TRACK_DEFAULTS.keepMs, liveMs: value.liveMs ?? TRACK_DEFAULTS.liveMs };
}

const COALESCE_MODES = ['replace', 'debounce', 'keep-last', 'supersede'];

/**
 * A coalescing key and its options checked (a problem named through `fail`), with the defaults filled in:
 * mode `replace`; for `debounce`, `delayMs` required and `maxWaitMs` 10 × `delayMs` (at least `delayMs`).
 */
export function coalesceSettings(key: unknown, options: unknown, fail: (message: string) => never): CoalesceSettings {
  const keyProblem = taskRules.deduplicationKey(key);
  if (keyProblem) fail(`the coalescing key must be ${keyProblem}, got ${describe(key)}`);
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    return fail(`the coalescing options must be { mode?, delayMs?, maxWaitMs? }, got ${describe(options)}`);
  }
  for (const field of Object.keys(options)) {
    if (!['mode', 'delayMs', 'maxWaitMs'].includes(field)) {
      fail(`the coalescing options have an unknown field "${field}" (known: mode, delayMs, maxWaitMs)`);
    }
  }
  const { mode = 'replace', delayMs, maxWaitMs } = options as CoalesceOptions;
  if (!COALESCE_MODES.includes(mode)) {
    fail(`the coalescing mode must be one of ${COALESCE_MODES.join(', ')}, got ${describe(mode)}`);
  }
  if (mode !== 'debounce') {
    if (delayMs !== undefined || maxWaitMs !== undefined) fail(`delayMs and maxWaitMs are for mode "debounce" only`);
    return { key: key as string, mode, delayMs: 0, maxWaitMs: 0 };
  }
  const inRange = (value: unknown): boolean =>
    typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= MAX_DELAY_MS;
  if (!inRange(delayMs)) fail(`debounce needs delayMs, an integer from 1 to ${MAX_DELAY_MS}, got ${describe(delayMs)}`);
  const longest = maxWaitMs ?? Math.min(MAX_DELAY_MS, (delayMs as number) * 10);
  if (!inRange(longest) || longest < (delayMs as number)) {
    fail(`debounce maxWaitMs must be an integer from delayMs to ${MAX_DELAY_MS}, got ${describe(maxWaitMs)}`);
  }
  return { key: key as string, mode, delayMs: delayMs as number, maxWaitMs: longest };
}
