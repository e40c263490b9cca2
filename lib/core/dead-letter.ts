/**
 * Why a task ended in dead letters: `malformed` (not a task we can decode), `failed` (its handler
 * threw on the last allowed attempt, or threw a non-retryable error), `interrupted` (its allowed
 * attempts were used up by runs that never finished: the worker died or lost its lease each time),
 * `expired` (its expiry time passed before a worker could start it).
 */
export type DeadLetterReason = 'malformed' | 'failed' | 'interrupted' | 'expired';

/** A plain-data description of an error, safe to store and to send back to a `send()` caller. */
export interface ErrorRecord {
  readonly name: string;
  readonly message: string;
  /** The first lines of the stack, enough to find the throwing frame. */
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
}

const STACK_LINES = 6;

export function toErrorRecord(error: unknown): ErrorRecord {
  if (error instanceof Error) {
    return {
      name: error.name,
      message: error.message,
      stack: error.stack?.split('\n').slice(0, STACK_LINES).join('\n'),
    };
  }
  if (typeof error === 'object' && error !== null && 'message' in error) {
    const record = error as { message: unknown; name?: unknown };
    return { name: typeof record.name === 'string' ? record.name : 'Error', message: String(record.message) };
  }
  return { name: 'Error', message: typeof error === 'string' ? error : JSON.stringify(error) ?? String(error) };
}
