import { createHash } from 'node:crypto';
import { nameProblem } from '../config/rules.js';
import {
  backoffDelay,
  backoffProblem,
  maxAttemptsProblem,
  mergeRetry,
  type BackoffOptions,
  type RetryPolicy,
} from '../model/retry-policy.js';
import {
  InvalidTaskError,
  LeaseLostError,
  NonRetryableTaskError,
  StepTooLargeError,
  TaskYieldedError,
} from '../model/errors.js';
import { describe } from '../support/describe.js';
import type { ClaimedTask } from './claimed-task.js';
import { loseLease, type Run } from './running.js';

/** Largest step result or checkpoint a task may store (its JSON, in UTF-8 bytes). */
export const MAX_STEP_BYTES = 512 * 1024;
/**
 * How long a task's steps outlive their last write when nothing deletes them (they go when the task ends): the
 * bound for a task that ended on a path that never knew it had steps. 30 days.
 */
export const STEPS_KEEP_MS = 30 * 86_400_000;
/** How often a long run renews its steps' TTL (its first save always does). */
const RENEW_EVERY_MS = 86_400_000;

/** A step's own retries (`ctx.step(name, fn, { attempts })`). */
export interface StepOptions {
  /**
   * Runs this step may have before its failure counts as a failed attempt of the task: while it has some left, a
   * failure of `fn` retries the task (after `backoff`, default the task's) without counting an attempt, so a task
   * of 1,000 steps with rare failures is not ended by their sum. Default: the pattern's `stepAttempts` (1 unless set:
   * every failure counts an attempt).
   */
  readonly attempts?: number;
  /** The delay before the step's next run; default the task's retry backoff. */
  readonly backoff?: BackoffOptions;
}

/** What the steps of one run ask of the worker around them. */
export interface StepContext {
  readonly task: ClaimedTask;
  readonly run: Run;
  readonly taskId: string;
  readonly workerId: string;
  readonly policy: RetryPolicy;
  /** Longest run before it gives its task back at a step boundary (0: none). */
  readonly maxRuntimeMs: number;
  /** A step's own runs when it names none (the pattern's `stepAttempts`). */
  readonly stepAttempts: number;
  /** Whether the worker is shutting down (a run gives its task back at its next step boundary). */
  readonly worker: { readonly stopping: boolean };
}

const UNDEFINED = 'u';
const JSON_VALUE = '=';

/**
 * The durable steps of one run (`ctx.step`, `ctx.checkpoint`): what earlier runs of the task saved is read once,
 * on first use; a step found there returns its saved result without running; a new step's result is saved
 * through the run's fence (saveStep-1.lua) before it is returned, so a run whose lease was taken over saves
 * nothing and is told (`LeaseLostError`). Results go through JSON on every run alike, so a step returns the same
 * value whether it ran now or before.
 */
export class RunSteps {
  private stored: Promise<Map<string, string>> | undefined;
  /** When this run last renewed its steps' TTL (Date.now()); its first save always does. */
  private renewedAt = 0;
  /** Steps of this run under way, by name: a second call of a step waits for the first. */
  // table-ok: only for the steps of one run that are under way
  private readonly running = new Map<string, Promise<unknown>>();

  constructor(private readonly context: StepContext) {}

  step<T>(name: string, fn: () => T | Promise<T>, options?: StepOptions): Promise<T> {
    const problem = nameProblem(name);
    if (problem) throw new InvalidTaskError(`ctx.step() name ${problem}, got ${describe(name)}`);
    if (typeof fn !== 'function')
      throw new InvalidTaskError(`ctx.step("${name}") needs a function, got ${describe(fn)}`);
    const attempts = stepAttempts(name, options, this.context.stepAttempts);
    const under = this.running.get(name);
    if (under) return under as Promise<T>;
    const running = this.runStep(name, fn, attempts, options?.backoff).finally(() => this.running.delete(name));
    this.running.set(name, running);
    return running;
  }

  async checkpoint(value: unknown): Promise<void> {
    const json = this.encode('checkpoint', value);
    const stored = await this.load();
    await this.save('checkpoint', '', json);
    stored.set('cp', json);
  }

  async getCheckpoint<T>(): Promise<T | undefined> {
    const saved = (await this.load()).get('cp');
    return saved === undefined ? undefined : (decode(saved) as T);
  }

  /** A stable idempotency key for step `name` of this task: the same on every run, another for every task and group. */
  stepKey(name: string): string {
    const problem = nameProblem(name);
    if (problem) throw new InvalidTaskError(`ctx.stepKey() name ${problem}, got ${describe(name)}`);
    const { task, taskId } = this.context;
    return `step-${createHash('sha256').update(`${task.keys.base}\n${taskId}\n${name}`).digest('base64url').slice(0, 32)}`;
  }

  private async runStep<T>(
    name: string,
    fn: () => T | Promise<T>,
    attempts: number,
    backoff: BackoffOptions | undefined,
  ): Promise<T> {
    const stored = await this.load();
    const saved = stored.get(`r:${name}`);
    if (saved !== undefined) return decode(saved) as T;
    this.yieldIfDue();
    // An earlier step's failure the handler caught and went on from no longer says how this run ends.
    this.context.run.again = undefined;
    let value: T;
    try {
      value = await fn();
    } catch (error) {
      if (attempts > 1) await this.failed(name, attempts, backoff);
      throw error;
    }
    const encoded = this.encode(name, value);
    await this.save('result', name, encoded);
    stored.set(`r:${name}`, encoded);
    return decode(encoded) as T;
  }

  /** At a step boundary: a run of a stopping worker, or past its maxRuntimeMs, gives its task back here. */
  private yieldIfDue(): void {
    const { run, maxRuntimeMs, worker, task, taskId } = this.context;
    const why = worker.stopping
      ? 'shutdown'
      : maxRuntimeMs > 0 && run.startedAt !== undefined && Date.now() - run.startedAt >= maxRuntimeMs
        ? 'maxRuntimeMs'
        : undefined;
    if (why === undefined) return;
    run.again = { why: 'yield', delayMs: 0 };
    throw new TaskYieldedError(task.keys.queue, taskId, why);
  }

  /** A step failed: counted on the step; with runs of its own left, the task runs again without counting an attempt. */
  private async failed(name: string, attempts: number, backoff: BackoffOptions | undefined): Promise<void> {
    const count = await this.save('failure', name, '');
    if (count >= attempts) return;
    const policy = backoff ? mergeRetry(this.context.policy, { backoff }) : this.context.policy;
    this.context.run.again = { why: 'step', delayMs: backoffDelay(policy.backoff, count) };
  }

  private load(): Promise<Map<string, string>> {
    const { task, taskId, run } = this.context;
    this.stored ??= task.steps.load(task.keys, taskId).then((hash) => {
      const stored = new Map(Object.entries(hash));
      if (stored.size > 0) run.stepped = true;
      return stored;
    });
    return this.stored;
  }

  /** A fenced write; a run that no longer holds its task is told (its signal aborts too). */
  private async save(what: 'result' | 'checkpoint' | 'failure', name: string, value: string): Promise<number> {
    const { task, taskId, run, workerId } = this.context;
    // Marked first: a save whose answer is lost may still have written, and the task's end must delete it.
    run.stepped = true;
    // The TTL is renewed by a run's first save and then once a day (a command less on every other step).
    const renew = Date.now() - this.renewedAt >= RENEW_EVERY_MS;
    if (renew) this.renewedAt = Date.now();
    const saved = await task.steps.save(task.keys, workerId, task.token, {
      taskId,
      what,
      name,
      value,
      keepMs: renew ? STEPS_KEEP_MS : 0,
    });
    if (saved === 'lost') {
      loseLease(run);
      throw new LeaseLostError(task.keys.queue, taskId, 'another run holds the task now; the step was not saved');
    }
    return saved.kind === 'failures' ? saved.count : 1;
  }

  /** A step's value as stored: its JSON (or `u` for undefined), within MAX_STEP_BYTES. */
  private encode(step: string, value: unknown): string {
    let json: string | undefined;
    try {
      json = JSON.stringify(value);
    } catch (error) {
      throw new NonRetryableTaskError(
        `nestjs-redis-tasks: ${step === 'checkpoint' ? 'the checkpoint' : `step "${step}"`} cannot be stored as JSON: ${(error as Error).message}`,
        { cause: error },
      );
    }
    const encoded = json === undefined ? UNDEFINED : JSON_VALUE + json;
    const bytes = Buffer.byteLength(encoded) - 1;
    if (bytes > MAX_STEP_BYTES) {
      const { task, taskId } = this.context;
      throw new StepTooLargeError(task.keys.queue, taskId, step, bytes, MAX_STEP_BYTES);
    }
    return encoded;
  }
}

function decode(saved: string): unknown {
  return saved.startsWith(JSON_VALUE) ? JSON.parse(saved.slice(1)) : undefined;
}

/** A step's `attempts` (the pattern's `stepAttempts` when not given), or InvalidTaskError naming the step. */
function stepAttempts(name: string, options: StepOptions | undefined, byDefault: number): number {
  if (options === undefined) return byDefault;
  if (options.attempts !== undefined && maxAttemptsProblem(options.attempts)) {
    throw new InvalidTaskError(
      `ctx.step("${name}") attempts ${maxAttemptsProblem(options.attempts)?.problem}, got ${describe(options.attempts)}`,
    );
  }
  const problem = options.backoff === undefined ? undefined : backoffProblem(options.backoff);
  if (problem) {
    throw new InvalidTaskError(
      `ctx.step("${name}") backoff${problem.field} ${problem.problem}, got ${describe(problem.value)}`,
    );
  }
  return options.attempts ?? byDefault;
}
