import { guessTaskId, type DecodeFailure, type TaskEnvelope } from '../model/codec.js';
import {
  notRunError,
  toErrorRecord,
  undecodableReason,
  type DeadLetterReason,
  type ErrorRecord,
} from '../model/dead-letter.js';
import { HandlerTimeoutError, isNonRetryable, requestOf } from '../model/errors.js';
import { replyErrorOf, type ReplyError } from '../model/reply.js';
import { decide, type RetryPolicy } from '../model/retry-policy.js';
import type { TaskLogger } from '../support/logger.js';
import type { ConsumerTrace } from '../support/tracing.js';
import type { ClaimedTask } from './claimed-task.js';
import type { RunOutcomes, Ran } from './run-outcomes.js';
import type { TaskOutcome, WorkerOptions } from './worker-types.js';
import type { RunAgain, Run } from './running.js';

/**
 * The runner's ways to end a run that did not succeed, each a fenced settle followed by its report: an
 * entry that cannot be read or a task that may not start goes to dead letters; a failed run is retried
 * with backoff or, when the policy says so, dead-lettered (with the `send()` caller's copy of the error).
 */
export class RunFailures {
  constructor(
    private readonly options: WorkerOptions,
    private readonly outcomes: RunOutcomes,
    private readonly logger: TaskLogger,
  ) {}

  /** An entry that cannot be read goes to dead letters with the reason (retrying cannot fix it). */
  async setAsideUndecodable(task: ClaimedTask, decoded: DecodeFailure): Promise<void> {
    const queue = task.keys.queue;
    const id = guessTaskId(task.raw);
    const reason = undecodableReason(decoded);
    if (
      await this.outcomes.settle(task, () =>
        task.deadLetter({ reason, attempts: 0, guessedId: id, detail: decoded.reason }),
      )
    ) {
      this.outcomes.report('dead-lettered', { queue, id, attempt: 0, durationMs: 0 }, { reason });
    }
    this.logger.warn(`moved ${reason} task ${id ?? '(no id)'} of "${queue}" to dead letters: ${decoded.reason}`);
  }

  /**
   * A task that may not start (attempts used up by interrupted runs, or expired; or `malformed`: its
   * out-of-line payload is gone) goes to dead letters.
   */
  async refuse(
    task: ClaimedTask,
    envelope: TaskEnvelope,
    attempts: number,
    reason: 'interrupted' | 'expired' | 'malformed',
    detail: string,
  ): Promise<void> {
    const queue = task.keys.queue;
    const error = notRunError(reason, detail);
    const replyError = this.replyError(envelope, queue, error, 0, reason);
    if (
      await this.outcomes.settle(
        task,
        () => task.deadLetter({ reason, attempts, envelope, detail, error, replyError }),
        envelope,
      )
    ) {
      this.outcomes.report(
        'dead-lettered',
        { queue, id: envelope.id, clientId: envelope.clientId, attempt: 0, durationMs: 0 },
        { reason },
      );
    }
    this.logger.warn(`task ${envelope.id} of "${queue}" moved to dead letters: ${detail}`);
  }

  /**
   * A run that failed: retried with backoff, or (attempts used up, non-retryable, asked for) dead-lettered; or,
   * when a durable step asked for it and the handler asked for nothing else (`mayRunAgain`), run again without
   * counting an attempt (see `again`).
   */
  async fail(
    task: ClaimedTask,
    envelope: TaskEnvelope,
    outcome: Extract<TaskOutcome, { status: 'failed' }>,
    policy: RetryPolicy,
    ran: Ran,
    run: Pick<Run, 'again' | 'trace'>,
    mayRunAgain: boolean,
  ): Promise<void> {
    if (run.again !== undefined && mayRunAgain) return this.again(task, envelope, run.again, ran, outcome.error);
    const trace = run.trace;
    const error = toErrorRecord(outcome.error);
    const requested = requestOf(outcome.error);
    const decision = decide(
      {
        attempt: ran.attempt,
        nonRetryable: isNonRetryable(outcome.error),
        timedOut: outcome.error instanceof HandlerTimeoutError,
        requested,
      },
      policy,
    );
    // A retry the handler asked for is not an error of the run.
    if (requested?.kind !== 'retry') trace?.failed(outcome.error);
    const failed: Failed = { task, envelope, error, requested, ran, trace };
    if (decision.kind === 'dead-letter') return this.deadLetterFailed(failed, decision.reason, decision.detail);
    return this.retryFailed(failed, decision.delayMs, policy);
  }

  /**
   * A run that gives its task back without counting an attempt: a durable step failed with runs of its own left
   * (after its backoff), or the run yielded at a step boundary (shutdown, maxRuntimeMs: due at once, behind newer
   * tasks). Its finished steps stay with the task.
   */
  async again(task: ClaimedTask, envelope: TaskEnvelope, again: RunAgain, ran: Ran, thrown: unknown): Promise<void> {
    const queue = task.keys.queue;
    let dueAt: number | 'replaced' | undefined;
    await this.outcomes.settle(
      task,
      async () => {
        dueAt = await task.retry(again.delayMs, envelope, again.why);
        return dueAt !== undefined;
      },
      envelope,
      ran,
    );
    if (dueAt === undefined || dueAt === 'replaced') {
      if (dueAt === 'replaced') this.outcomes.report('replaced', ran);
      return;
    }
    if (again.why === 'yield') {
      this.outcomes.report('yielded', ran);
      this.logger.log(`task ${envelope.id} of "${queue}" gave itself back at a step boundary (${errorText(thrown)})`);
    } else {
      const error = toErrorRecord(thrown);
      this.outcomes.report('retried', ran, { error, retryInMs: again.delayMs });
      this.logger.warn(
        `task ${envelope.id} of "${queue}": a step failed (${error.message}); it runs again in ${again.delayMs} ms, no attempt counted (the step has runs of its own left)`,
      );
    }
    this.options.onDelayed?.(queue, dueAt);
  }

  /** A failed run whose task goes to dead letters (its `send()` caller answered with the failure). */
  private async deadLetterFailed(failed: Failed, reason: DeadLetterReason, detail: string): Promise<void> {
    const { task, envelope, error, requested, ran, trace } = failed;
    const queue = task.keys.queue;
    const replyError = this.replyError(envelope, queue, error, ran.attempt, reason);
    const attempts = ran.attempt;
    const settled = await this.outcomes.settle(
      task,
      () => task.deadLetter({ reason, attempts, envelope, detail, error, replyError }),
      envelope,
      ran,
    );
    if (!settled) return;
    this.outcomes.report('dead-lettered', ran, { reason, error });
    trace?.event('dead-lettered', { 'nestjs_redis_tasks.reason': reason });
    this.logger.warn(
      requested?.kind === 'dead-letter'
        ? `task ${envelope.id} of "${queue}" moved to dead letters at its handler's request (reason ${reason}): ${detail}`
        : `task ${envelope.id} of "${queue}" moved to dead letters (${detail}): ${error.message}`,
    );
    if (requested === undefined) this.debugStack(envelope.id, queue, error);
  }

  /** A failed run whose task runs again after `delay` ms (unless a newer task of its coalescing key took its place). */
  private async retryFailed(failed: Failed, delay: number, policy: RetryPolicy): Promise<void> {
    const { task, envelope, error, requested, ran, trace } = failed;
    const queue = task.keys.queue;
    let dueAt: number | 'replaced' | undefined;
    await this.outcomes.settle(
      task,
      async () => {
        dueAt = await task.retry(delay, envelope);
        return dueAt !== undefined;
      },
      envelope,
      ran,
    );
    if (dueAt === 'replaced') {
      this.outcomes.report('replaced', ran, { error });
      this.logger.log(
        `task ${envelope.id} of "${queue}" failed (${error.message}); not retried: a newer task of its coalescing key took its place`,
      );
    } else if (dueAt !== undefined) {
      this.outcomes.report('retried', ran, { error, retryInMs: delay });
      trace?.event('retry scheduled', { 'nestjs_redis_tasks.retry_in_ms': delay });
      if (requested?.kind === 'retry') {
        this.logger.log(
          `task ${envelope.id} of "${queue}" runs again in ${delay} ms at its handler's request (${error.message}); attempt ${ran.attempt}/${policy.maxAttempts} counted`,
        );
      } else {
        this.logger.warn(
          `task ${envelope.id} of "${queue}" failed attempt ${ran.attempt}/${policy.maxAttempts} (${error.message}); retrying in ${delay} ms`,
        );
        this.debugStack(envelope.id, queue, error);
      }
      this.options.onDelayed?.(queue, dueAt);
    }
  }

  /** A failed attempt is one WARN line; its stack (the first lines, as dead letters keep it) at debug level. */
  private debugStack(id: string, queue: string, error: ErrorRecord): void {
    if (error.stack) this.logger.debug?.(`task ${id} of "${queue}": ${error.stack}`);
  }

  /** The `send()` caller's copy of a failure (no stack unless `sendErrorStack`); none for an `emit`. */
  private replyError(
    envelope: TaskEnvelope,
    pattern: string,
    error: ErrorRecord,
    attempt: number,
    reason: DeadLetterReason,
  ): ReplyError | undefined {
    if (envelope.replyTo === undefined) return undefined;
    return replyErrorOf(error, { taskId: envelope.id, pattern, attempt, reason }, this.options.sendErrorStack === true);
  }
}

/** A failed run, as the steps after the decision see it. */
interface Failed {
  readonly task: ClaimedTask;
  readonly envelope: TaskEnvelope;
  readonly error: ErrorRecord;
  readonly requested: ReturnType<typeof requestOf>;
  readonly ran: Ran;
  readonly trace: ConsumerTrace | undefined;
}

/** The message of a thrown value, for a log line (never its payload: errors of ours say none). */
function errorText(thrown: unknown): string {
  return thrown instanceof Error ? thrown.message : String(thrown);
}
