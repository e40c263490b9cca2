import type { DeadLetterReason, ErrorRecord } from './dead-letter.js';

/** How a run of a task ended, as reported to `onOutcome` listeners (events, metrics). */
export type TaskOutcomeKind =
  | 'completed'
  | 'retried'
  | 'dead-lettered'
  | 'lease-lost'
  | 'cancelled'
  | 'replaced'
  /** Given back at a step boundary (shutdown, maxRuntimeMs): waits again, no attempt counted. */
  | 'yielded';

/** One task outcome. Never carries the payload, so it is safe to log. */
export interface TaskOutcomeEvent {
  readonly outcome: TaskOutcomeKind;
  /** The pattern. */
  readonly queue: string;
  readonly id?: string;
  readonly clientId?: string;
  /** 1-based number of the run that ended (0 when the task was not run: expired, malformed, interrupted). */
  readonly attempt: number;
  readonly workerId: string;
  /** How long the handler ran (ms); 0 when it was not run. */
  readonly durationMs: number;
  /** Why it went to dead letters. */
  readonly reason?: DeadLetterReason;
  /** The handler's error (retried, dead-lettered as failed). */
  readonly error?: ErrorRecord;
  /** Delay before the next attempt (retried). */
  readonly retryInMs?: number;
}
