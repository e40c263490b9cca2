import { validateDeadLetterReason, validateLeaseExtension, validateRetryDelay } from '../config/rules.js';
import { InvalidTaskError, LeaseLostError } from '../model/errors.js';
import type { RetryPolicy } from '../model/retry-policy.js';
import { RunSteps, type StepOptions } from './run-steps.js';
import type { TaskLogger } from '../support/logger.js';
import type { ClaimedTask } from './claimed-task.js';
import { loseLease, type Run } from './running.js';
import type { RunControl, WorkerOptions } from './worker-types.js';

/** Largest progress value (its JSON, in UTF-8 bytes). */
export const MAX_PROGRESS_BYTES = 64 * 1024;

/** A progress value as JSON, or InvalidTaskError naming what is wrong with it. */
function progressJson(value: unknown): string {
  let json: string | undefined;
  try {
    json = JSON.stringify(value === undefined ? null : value);
  } catch (error) {
    throw new InvalidTaskError(`ctx.progress() needs a JSON value: ${(error as Error).message}`);
  }
  if (json === undefined) throw new InvalidTaskError(`ctx.progress() needs a JSON value, got a ${typeof value}`);
  if (Buffer.byteLength(json) > MAX_PROGRESS_BYTES) {
    throw new InvalidTaskError(
      `ctx.progress() got ${Buffer.byteLength(json)} bytes of JSON; at most ${MAX_PROGRESS_BYTES}`,
    );
  }
  return json;
}

/**
 * A handler's say over its own run (`ctx.retry()`, `ctx.deadLetter()`, `ctx.extendLease()`). Every call is
 * fenced: once the run lost its lease, was given up at shutdown, or is over, it is refused (logged once
 * per kind of call, answered `false`) and nothing is applied. A refusal never throws: such calls come
 * late, from a timer or an un-awaited keep-alive, where a throw or a rejection would end the process.
 */
export class HandlerControl implements RunControl {
  /** The run's durable steps, made on first use (most handlers have none). */
  private steps: RunSteps | undefined;

  constructor(
    private readonly task: ClaimedTask,
    private readonly run: Run,
    private readonly taskId: string,
    private readonly options: WorkerOptions,
    /** Whether shutdown gave the worker's tasks back, or has begun (the worker's completer). */
    private readonly worker: { readonly released: boolean; readonly stopping: boolean },
    private readonly logger: TaskLogger,
    private readonly policy: RetryPolicy,
  ) {}

  step<T>(name: string, fn: () => T | Promise<T>, options?: StepOptions): Promise<T> {
    return rejecting(() => this.durable('step').step(name, fn, options));
  }

  checkpoint(value: unknown): Promise<void> {
    return rejecting(() => this.durable('checkpoint').checkpoint(value));
  }

  getCheckpoint<T = unknown>(): Promise<T | undefined> {
    return rejecting(() => this.durable('getCheckpoint').getCheckpoint<T>());
  }

  stepKey(name: string): string {
    return this.durable('stepKey', false).stepKey(name);
  }

  /** The run's steps; a call from a run that no longer holds its task (or is over) throws LeaseLostError. */
  private durable(what: string, fenced = true): RunSteps {
    if (fenced && this.refused(what)) {
      throw new LeaseLostError(
        this.task.keys.queue,
        this.taskId,
        `ctx.${what}() came after the run ended or lost its task`,
      );
    }
    this.steps ??= new RunSteps({
      task: this.task,
      run: this.run,
      taskId: this.taskId,
      workerId: this.options.workerId,
      policy: this.policy,
      maxRuntimeMs: this.options.patterns.maxRuntime(this.task.keys.queue),
      stepAttempts: this.options.patterns.stepAttempts(this.task.keys.queue),
      worker: this.worker,
    });
    return this.steps;
  }

  retry(options?: { readonly delayMs?: number }): boolean {
    if (this.refused('retry')) return false;
    const delayMs =
      options?.delayMs === undefined ? undefined : validateRetryDelay('ctx.retry() delayMs', options.delayMs);
    this.run.requested = { kind: 'retry', delayMs };
    return true;
  }

  deadLetter(reason: string): boolean {
    if (this.refused('deadLetter')) return false;
    this.run.requested = { kind: 'dead-letter', detail: validateDeadLetterReason('ctx.deadLetter() reason', reason) };
    return true;
  }

  async extendLease(ms: number): Promise<boolean> {
    if (this.refused('extendLease')) return false;
    validateLeaseExtension('ctx.extendLease() ms', ms);
    // Fenced in Redis: the run's token must still be in this worker's processing hash. A Redis failure
    // answers false too (the lease could not be confirmed), never a rejection.
    const held = await this.task
      .stillHeld(this.options.leaseMs + this.options.heartbeatIntervalMs)
      .catch(() => undefined);
    if (held === false) loseLease(this.run);
    if (held !== true || this.refused('extendLease')) return false;
    if (this.run.deadline !== undefined) this.run.deadline = Math.max(this.run.deadline, Date.now() + ms);
    return true;
  }

  progress(value: unknown): Promise<boolean> {
    const json = progressJson(value);
    const envelope = this.run.about;
    if (this.refused('progress') || !envelope) return Promise.resolve(false);
    const seq = (this.run.progressSeq ?? 0) + 1;
    this.run.progressSeq = seq;
    // Reports go out in call order on the worker's connection; the run's settle waits for the last one,
    // so a caller hears every value before the result.
    const reported = this.task.progress(envelope, seq, json).then(
      (held) => {
        if (held) this.options.onProgress?.({ queue: this.task.keys.queue, id: envelope.id, seq, value });
        return held;
      },
      () => false,
    );
    this.run.progressing = reported;
    return reported;
  }

  /** Whether a control call must be refused now (logged once per kind of call and run). */
  private refused(what: string): boolean {
    const why = this.run.leaseLost
      ? 'its lease was lost: another process recovered the task'
      : this.worker.released
        ? 'the worker gave it up at shutdown'
        : this.run.over
          ? 'the run is over'
          : undefined;
    if (why === undefined) return false;
    if (!this.warned.has(what)) {
      this.warned.add(what);
      this.logger.warn(
        `refused ctx.${what}() of task ${this.taskId} of "${this.task.keys.queue}": ${why}; nothing was applied`,
      );
    }
    return true;
  }

  /** The kinds of call refused already (a keep-alive timer would log every tick). */
  // table-ok: made only once a run is refused a call
  private readonly warned = new Set<string>();
}

/** A promise-returning call whose synchronous throw (a bad argument, a refused run) becomes its rejection. */
function rejecting<T>(call: () => Promise<T>): Promise<T> {
  try {
    return call();
  } catch (error) {
    return Promise.reject(error instanceof Error ? error : new Error(String(error)));
  }
}
