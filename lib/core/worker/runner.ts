import { decodeEntry, type DecodedEntry, type TaskEnvelope } from '../model/codec.js';
import { inspectableThrown } from '../model/dead-letter.js';
import { DeadLetterTaskError, RetryTaskError } from '../model/errors.js';
import { admit, mergeRetry, type HandlerRequest, type RetryPolicy } from '../model/retry-policy.js';
import { DEFAULT_GROUP } from '../redis/keys.js';
import type { TaskLogger } from '../support/logger.js';
import type { ClaimedTask } from './claimed-task.js';
import type { Completer } from './completer.js';
import type { Run } from './running.js';
import { HandlerControl } from './handler-control.js';
import { RunExecution, type RunningWorker } from './execution.js';
import { withHandlerTimeout } from './handler-timeout.js';
import { RunOutcomes, type Ran } from './run-outcomes.js';
import { RunFailures } from './run-failures.js';
import { resultReply } from './result-reply.js';
import { startStep } from '../model/task-traits.js';
import type { TaskExecutor, TaskOutcome, WorkerOptions } from './worker-types.js';

/**
 * Runs one claimed task, top-down: decode -> guard (may it run?) -> execute -> decide -> settle ->
 * report. Every settle is a fenced script; a task whose outcome cannot be written stays held.
 */
export class TaskRunner {
  /** Settles through Redis outages, and tells the outcome listener. */
  private readonly outcomes: RunOutcomes;
  /** Where a run that did not succeed ends (dead letters, or a retry). */
  private readonly failures: RunFailures;
  /** The worker's id and group, as every run's execution names them. */
  private readonly worker: RunningWorker;

  constructor(
    private readonly options: WorkerOptions,
    private readonly executor: TaskExecutor,
    /** Where every success goes (riding on a claim call, or this turn's acknowledgement call). */
    private readonly completer: Completer,
    private readonly logger: TaskLogger,
  ) {
    this.outcomes = new RunOutcomes(options, completer, logger);
    this.failures = new RunFailures(options, this.outcomes, logger);
    this.worker = { workerId: options.workerId, group: options.group ?? DEFAULT_GROUP };
  }

  /**
   * Not an async function: a task that runs (the common case) is the promise of `execute`, with no
   * promise of its own around it (one less per task, and two fewer turns of the microtask queue). What
   * throws here rejects, as it would in an async function (the worker logs it and keeps the task held).
   */
  run(task: ClaimedTask, run: Run): Promise<void> {
    try {
      return this.start(task, run);
    } catch (error) {
      return Promise.reject(error instanceof Error ? error : new Error(String(error)));
    }
  }

  private start(task: ClaimedTask, run: Run): Promise<void> {
    // Decode: an entry we cannot read is set aside with the reason (retrying cannot fix it).
    const decoded = decodeEntry(task.raw);
    if (!decoded.ok) return this.failures.setAsideUndecodable(task, decoded);
    // An out-of-line payload is read first (one MGET per turn and shard); one that is gone cannot run.
    if (decoded.entry.envelope.body === undefined) return this.started(task, run, decoded.entry);
    const { envelope, attempts } = decoded.entry;
    return task
      .withPayload(decoded.entry)
      .then((read) =>
        typeof read === 'string'
          ? this.failures.refuse(task, envelope, attempts, 'malformed', read)
          : this.started(task, run, read),
      );
  }

  private started(task: ClaimedTask, run: Run, decoded: DecodedEntry): Promise<void> {
    // Latest wins: a task with a coalescing key first takes its key's newest entry (or does not run).
    if (startStep(decoded.envelope) === 'startCoalesced') return this.startCoalesced(task, run, decoded);
    return this.admit(task, run, decoded);
  }

  private admit(task: ClaimedTask, run: Run, { envelope, attempts }: DecodedEntry): Promise<void> {
    const policy = mergeRetry(this.options.patterns.retryPolicy(task.keys.queue), envelope);
    // Guard: attempts used up by interrupted runs, or expired, it does not start.
    const admission = admit({
      attempts,
      maxAttempts: policy.maxAttempts,
      expiresAt: envelope.expiresAt,
      now: Date.now(),
    });
    if (admission.kind === 'dead-letter')
      return this.failures.refuse(task, envelope, attempts, admission.reason, admission.detail);
    const { attempt } = admission;
    // A tracked task is recorded running first: by its claim, else (a flow's node, a cancel mark) by startTasks here.
    if (startStep(envelope) === 'startTasks' && !task.startedByClaim)
      return this.startTracked(task, run, envelope, attempt, policy);
    return this.traced(task, run, envelope, attempt, policy);
  }

  private async startCoalesced(task: ClaimedTask, run: Run, claimed: DecodedEntry): Promise<void> {
    const started = await task.startCoalesced(claimed.envelope.id);
    if (started === 'run') return this.admit(task, run, claimed);
    if (started === 'replaced' || started === 'lost') return this.notRun(task, claimed.envelope, 0, started);
    const newest = decodeEntry(started.entry);
    if (!newest.ok) return this.failures.setAsideUndecodable(task, newest);
    return this.admit(task, run, newest.entry);
  }

  private async startTracked(
    task: ClaimedTask,
    run: Run,
    envelope: TaskEnvelope,
    attempt: number,
    policy: RetryPolicy,
  ): Promise<void> {
    const started = await task.start(envelope, attempt);
    if (started === 'run') return this.traced(task, run, envelope, attempt, policy);
    this.notRun(task, envelope, attempt, started);
  }

  /** A task that does not run: cancelled or replaced before it started, or no longer held. */
  private notRun(task: ClaimedTask, envelope: TaskEnvelope, attempt: number, why: 'cancelled' | 'replaced' | 'lost') {
    const ran: Ran = { queue: task.keys.queue, id: envelope.id, clientId: envelope.clientId, attempt, durationMs: 0 };
    if (why === 'lost') return this.outcomes.leaseLost(task, envelope, ran);
    this.outcomes.report(why, ran);
    this.logger.log(
      why === 'cancelled'
        ? `task ${envelope.id} of "${task.keys.queue}" was cancelled before it started`
        : `task ${envelope.id} of "${task.keys.queue}" was replaced by a newer task of its coalescing key before it started`,
    );
  }

  /** Runs the task inside its CONSUMER span, when traced. */
  private traced(
    task: ClaimedTask,
    run: Run,
    envelope: TaskEnvelope,
    attempt: number,
    policy: RetryPolicy,
  ): Promise<void> {
    const queue = task.keys.queue;
    const trace = this.options.tracing?.consume({
      pattern: queue,
      id: envelope.id,
      clientId: envelope.clientId,
      attempt,
      group: this.options.group ?? DEFAULT_GROUP,
      workerId: this.options.workerId,
      traceparent: envelope.traceparent,
      tracestate: envelope.tracestate,
    });
    if (!trace) return this.execute(task, run, envelope, attempt, policy);
    run.trace = trace;
    return this.execute(task, run, envelope, attempt, policy).finally(() => trace.end());
  }

  /** Execute, decide, settle, report. */
  private async execute(
    task: ClaimedTask,
    run: Run,
    envelope: TaskEnvelope,
    attempt: number,
    policy: RetryPolicy,
  ): Promise<void> {
    const queue = task.keys.queue;
    const startedAt = performance.now();
    run.startedAt = Date.now();
    run.about = envelope;
    run.attempt = attempt;
    // Revoked before its handler started (a cancel once the claim recorded it running; a lost lease): never started.
    if (run.leaseLost) return this.notRun(task, envelope, attempt, revokedWhy(run));
    let outcome = await this.callHandler(task, envelope, queue, attempt, policy, run);
    run.over = true;
    // Its last progress report goes out before its outcome (a caller hears every value before the result).
    if (run.progressing) await run.progressing;
    if (outcome.status === 'failed') outcome = { status: 'failed', error: inspectableThrown(outcome.error) };
    // What the handler asked for (ctx.retry(), ctx.deadLetter()) wins over what it returned or threw.
    const requested = run.requested;
    if (requested) outcome = { status: 'failed', error: requestedError(requested, outcome) };
    // Fields named one by one: a spread followed by more fields takes V8's slow path (~1 µs a task).
    const ran: Ran = {
      queue,
      id: envelope.id,
      clientId: envelope.clientId,
      attempt,
      durationMs: performance.now() - startedAt,
    };
    if (run.cancelled || run.replacedBy !== undefined) {
      const why = run.cancelled ? 'cancelled' : 'replaced';
      this.outcomes.report(why, ran);
      run.trace?.event(why);
      this.logger.log(
        `task ${envelope.id} of "${queue}" was ${run.cancelled ? 'cancelled' : `superseded by task ${run.replacedBy}`} while it ran; its handler's outcome was discarded`,
      );
      return;
    }
    if (run.leaseLost) {
      this.outcomes.report('lease-lost', ran);
      run.trace?.event('lease lost');
    }
    if (this.completer.released || run.leaseLost) {
      // Returned to its queue (shutdown) or recovered elsewhere (lease lost): not ours to settle any more,
      // and the fenced scripts would refuse it anyway.
      this.logger.warn(
        `task ${envelope.id} of "${queue}" finished after this worker gave it up; its outcome was discarded`,
      );
      return;
    }
    // Decide, settle, report (a step may have asked for another run without counting an attempt: see RunFailures).
    const settled =
      outcome.status === 'succeeded'
        ? this.succeed(task, envelope, outcome, ran, run.stepped === true)
        : this.failures.fail(task, envelope, outcome, policy, ran, run, requested === undefined);
    return envelope.flow === undefined ? settled : this.flowSettled(task, settled);
  }

  /** A node of a flow: its flow hears it once settled (its children released now), not at the next sweep. */
  private async flowSettled(task: ClaimedTask, settled: Promise<void> | undefined): Promise<void> {
    await settled;
    this.options.onFlowSettled?.(task.keys);
  }

  /** Not an async function: the common case (a batched acknowledgement) makes no promise at all. */
  private succeed(
    task: ClaimedTask,
    envelope: TaskEnvelope,
    outcome: TaskOutcome & { status: 'succeeded' },
    ran: Ran,
    stepped: boolean,
  ): Promise<void> | undefined {
    // The common case rides on the claim loop's next call (acknowledged in batches); a task with durable steps
    // is acknowledged on its own (its acknowledgement deletes them).
    const rode =
      !stepped &&
      this.completer.ride(task, envelope, (held) => {
        if (!held) this.outcomes.leaseLost(task, envelope, ran);
        else if (this.outcomes.reporting) this.outcomes.report('completed', ran);
      });
    if (rode) return;
    const reply = replyOf(envelope, outcome, ran, this.options, this.logger);
    return this.outcomes
      .settle(task, () => this.completer.acknowledge(task, envelope, reply), envelope, ran)
      .then((settled) => {
        if (settled) this.outcomes.report('completed', ran);
      });
  }

  /** Calls the handler (inside its run's span, when traced); with a handler timeout, abandons it (as failed) once that passes. */
  private callHandler(
    task: ClaimedTask,
    envelope: TaskEnvelope,
    queue: string,
    attempt: number,
    policy: RetryPolicy,
    run: Run,
  ): Promise<TaskOutcome> {
    const timeoutMs = this.options.patterns.handlerTimeout(queue);
    const abort = run.abort;
    if (timeoutMs > 0) run.deadline = Date.now() + timeoutMs;
    let running: Promise<TaskOutcome>;
    const trace = run.trace;
    try {
      const control = new HandlerControl(task, run, envelope.id, this.options, this.completer, this.logger, policy);
      const execution = new RunExecution(queue, envelope, attempt, policy.maxAttempts, this.worker, control, abort);
      running = trace ? trace.within(() => this.executor(execution)) : this.executor(execution);
    } catch (error) {
      return Promise.resolve({ status: 'failed', error });
    }
    // The handler's own rejection is its failure. Not an async function: without a timeout (the common
    // case) this is the one promise made here per task.
    running = running.catch((error: unknown): TaskOutcome => ({ status: 'failed', error }));
    return timeoutMs > 0
      ? withHandlerTimeout(running, { taskId: envelope.id, queue, timeoutMs, run, logger: this.logger })
      : running;
  }
}

/**
 * A success's result as JSON for whoever hears it (a `send()` caller, or a node's children), serialized
 * before settling: a result that cannot be sent still completes the task (its work is done), and its
 * hearer gets a typed error instead (see resultReply).
 */
function replyOf(
  envelope: TaskEnvelope,
  outcome: TaskOutcome & { status: 'succeeded' },
  { queue, attempt }: Ran,
  options: WorkerOptions,
  logger: TaskLogger,
): string | undefined {
  if (envelope.replyTo === undefined && envelope.flow === undefined) return outcome.reply;
  const about = { taskId: envelope.id, pattern: queue, attempt };
  return resultReply(about, outcome.response, options.maxResultBytes, logger);
}

/** The error a handler's request stands for (what its dead letter and events record), its cause the run's own error. */
function requestedError(requested: HandlerRequest, outcome: TaskOutcome): Error {
  const cause = outcome.status === 'failed' ? { cause: outcome.error } : undefined;
  const error =
    requested.kind === 'retry'
      ? new RetryTaskError('ctx.retry()', { delayMs: requested.delayMs, ...cause })
      : new DeadLetterTaskError(requested.detail, cause);
  // Made here, not by the handler: its stack would show the library's frames, which tell nothing.
  error.stack = undefined;
  return error;
}

/** Why a run lost its token: cancelled, replaced by a newer task of its coalescing key, or its lease lost. */
function revokedWhy(run: Run): 'cancelled' | 'replaced' | 'lost' {
  if (run.cancelled) return 'cancelled';
  return run.replacedBy === undefined ? 'lost' : 'replaced';
}
