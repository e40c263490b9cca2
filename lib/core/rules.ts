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
/** Most of an undecodable entry kept in its dead letter (characters); the rest is counted, not stored. */
export const MAX_RAW_IN_DEAD_LETTER = 65_536;

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

/** Makes text from Redis safe for one log line: control characters escaped, length capped. */
export function printable(text: string, limit = 2_000): string {
  let escaped = '';
  for (const character of text.length > limit ? text.slice(0, limit) : text) {
    const code = character.charCodeAt(0);
    escaped += code < 32 || code === 127 ? `\\x${code.toString(16).padStart(2, '0')}` : character;
  }
  return text.length > limit ? `${escaped}… (${text.length - limit} more characters)` : escaped;
}
