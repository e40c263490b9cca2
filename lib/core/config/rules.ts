import { InvalidOptionError } from '../model/errors.js';
import { backoffProblem, maxAttemptsProblem, type BackoffOptions, type RetryOptions, type RetryProblem } from '../model/retry-policy.js';
import { describe } from '../support/describe.js';

/**
 * The rules every task must meet, in one place: the producer applies them to every item it enqueues,
 * whatever built it (the record builder, a hand-made `RedisTaskRecord`, a plain payload), and the
 * options use the same name rule. A rule returns why a value breaks it, or undefined.
 */

/** Longest client id, group or worker id (they are part of key names). */
export const MAX_NAME_LENGTH = 200;
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

/** A pattern: any string Nest can route, within a length. */
export function patternProblem(value: unknown): string | undefined {
  if (typeof value !== 'string' || value.length === 0 || value.length > MAX_PATTERN_LENGTH) {
    return `must be a non-empty string of at most ${MAX_PATTERN_LENGTH} characters`;
  }
  return hasControlCharacter(value) ? 'must not contain control characters' : undefined;
}

/** Builds the error a broken rule throws, naming where (an option, a setter, a task field). */
export type MakeError = (where: string, message: string) => Error;

const optionError: MakeError = (where, message) => new InvalidOptionError(where, message);

function raise(where: string, found: RetryProblem, makeError: MakeError): never {
  throw makeError(`${where}${found.field}`, `${found.problem}, got ${describe(found.value)}`);
}

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
  if (found) raise(where, found, makeError);
  return value as number;
}

export function validateBackoff(where: string, value: unknown, makeError = optionError): BackoffOptions {
  const found = backoffProblem(value);
  if (found) raise(where, found, makeError);
  return value as BackoffOptions;
}
