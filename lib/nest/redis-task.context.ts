import { BaseRpcContext } from '@nestjs/microservices';
import type { RunControl } from '../core/worker/worker-types.js';
import type { StepOptions } from '../core/worker/run-steps.js';
import type { FlowNodeInfo, FlowParentResult } from '../core/model/flow.js';

export type { RunControl, StepOptions };

/** What a handler can learn about the task it runs. */
export interface RedisTaskInfo {
  readonly id: string;
  readonly pattern: string;
  readonly clientId: string;
  /** 1-based number of this run. */
  readonly attempt: number;
  /** Runs allowed in all; after a failure of the last one the task goes to dead letters. */
  readonly maxAttempts: number;
  readonly enqueuedAt: Date;
  readonly workerId: string;
  /** The consumer group running this copy of the task (`default` unless the transport names one). */
  readonly group: string;
  /** Fires when the worker gives up on this run (shutdown timeout, lost lease, cancelled: `TaskCancelledError`). */
  readonly signal: AbortSignal;
  /** A node of a flow (`RedisTaskClient.flow()`): its flow id, node id and parents' outcomes. */
  readonly flow?: FlowNodeInfo;
}

/**
 * `@Ctx()` of a `RedisTaskTransport` handler: what the task is, and the handler's say over its own run.
 * (In a unit test of a handler, make one with `new RedisTaskContext([info])`, or `[info, control]` to
 * see what the handler decides.)
 */
export class RedisTaskContext extends BaseRpcContext<[RedisTaskInfo, RunControl?]> {
  getTask(): RedisTaskInfo {
    return this.args[0];
  }

  getTaskId(): string {
    return this.args[0].id;
  }

  getPattern(): string {
    return this.args[0].pattern;
  }

  getClientId(): string {
    return this.args[0].clientId;
  }

  getAttempt(): number {
    return this.args[0].attempt;
  }

  getMaxAttempts(): number {
    return this.args[0].maxAttempts;
  }

  getEnqueuedAt(): Date {
    return this.args[0].enqueuedAt;
  }

  getWorkerId(): string {
    return this.args[0].workerId;
  }

  getGroup(): string {
    return this.args[0].group;
  }

  /** A node of a flow: its flow id and node id (undefined for a task of no flow). */
  getFlow(): { readonly flowId: string; readonly nodeId: string } | undefined {
    const flow = this.args[0].flow;
    return flow ? { flowId: flow.flowId, nodeId: flow.nodeId } : undefined;
  }

  /**
   * A node of a flow: each parent's outcome, by node id, as it was when this node was released:
   * `{ state: 'succeeded', result }` (the parent handler's return value), or `failed`, `cancelled`, `skipped`
   * with its `error` (a node runs after a parent that did not succeed only with `onParentFailure: 'run'`).
   * Empty for a node without parents, or a task of no flow.
   */
  parentResults(): Readonly<Record<string, FlowParentResult>> {
    return this.args[0].flow?.parents ?? {};
  }

  getSignal(): AbortSignal {
    return this.args[0].signal;
  }

  /** Aborted when the worker gives up on this run: its lease was lost, shutdown, or its handler timeout passed. */
  get signal(): AbortSignal {
    return this.args[0].signal;
  }

  /**
   * Run the task again after `delayMs` (default: the retry policy's backoff), whatever the handler returns
   * or throws after this call (or `throw new RetryTaskError(message, { delayMs })`). The run counts as an
   * attempt: on the last one the task goes to dead letters. A `send()` caller waits for a later run.
   * Returns `false` (nothing applied; logged) when this run no longer holds the task or is over: a late
   * call, from a timer say, never throws.
   */
  retry(options?: { readonly delayMs?: number }): boolean {
    return this.control('retry').retry(options);
  }

  /**
   * Send the task to dead letters when the handler returns (reason `rejected`, your `reason` as the
   * record's `detail`), without further attempts; or `throw new DeadLetterTaskError(reason)`. Returns
   * `false` (nothing applied; logged) when this run no longer holds the task or is over.
   */
  deadLetter(reason: string): boolean {
    return this.control('deadLetter').deadLetter(reason);
  }

  /**
   * For long work: confirms in Redis that this run still holds the task, renews the worker's lease, and
   * moves this run's handler-timeout deadline (`handlerTimeoutMs`) to at least `ms` from now. Resolves
   * `true` when extended, `false` when the task is held no more (stop working on it: another process has
   * it, and `signal` aborts with `LeaseLostError`), the run is over, or Redis could not confirm the lease.
   * Never rejects, so `setInterval(() => ctx.extendLease(60_000), 20_000)` is safe as it is.
   */
  extendLease(ms: number): Promise<boolean> {
    return this.control('extendLease').extendLease(ms);
  }

  /**
   * Reports progress: any JSON value (at most 64 KiB), e.g. `{ done: 40, of: 100 }`. A tracked task keeps the
   * last one (`getTask`), a `send()` caller whose record has `onProgress` hears each in order before the
   * result, and the transport emits `progress`. Fenced like the other calls: resolves `false` (nothing
   * reported) once this run no longer holds the task. Throws `InvalidTaskError` for a value that is not
   * JSON or too large.
   */
  progress(value: unknown): Promise<boolean> {
    return this.control('progress').progress(value);
  }

  /**
   * A durable step: `fn` runs once per task, across retries, lease takeovers, deploys and restarts. Its result
   * (JSON, at most 512 KiB: `StepTooLargeError`) is saved before it is returned, and every later run of the task
   * gets the saved result without running `fn` (a step returns the same JSON value either way). Names are unique
   * per task (`charge`, `page-${n}`): a second call of a name returns the first's result.
   * - With `{ attempts: n }`, a failure of `fn` while the step has runs of its own left retries the task without
   *   counting an attempt (after `backoff`, default the task's), so 1,000 steps with rare failures do not add up.
   * - At a step boundary, a run of a worker shutting down, or past `maxRuntimeMs`, gives its task back
   *   (`TaskYieldedError`): its finished steps are kept and no attempt is counted.
   * - Fenced: a run whose task another process holds now (lease lost, cancelled, superseded) saves nothing
   *   (`LeaseLostError`). `fn` may run again only when its run died or lost the task between its end and the save:
   *   hand `ctx.stepKey(name)` to external APIs as the idempotency key.
   */
  step<T>(name: string, fn: () => T | Promise<T>, options?: StepOptions): Promise<T> {
    return this.control('step').step(name, fn, options);
  }

  /** Saves a cursor for long iterations (any JSON value, at most 512 KiB) through the run's fence; read it back with `getCheckpoint()`. */
  checkpoint(value: unknown): Promise<void> {
    return this.control('checkpoint').checkpoint(value);
  }

  /** The last checkpoint any run of this task saved (undefined when none). */
  getCheckpoint<T = unknown>(): Promise<T | undefined> {
    return this.control('getCheckpoint').getCheckpoint<T>();
  }

  /** A stable idempotency key for step `name` of this task: the same on every attempt, another for every task. */
  stepKey(name: string): string {
    return this.control('stepKey').stepKey(name);
  }

  private control(what: string): RunControl {
    const control = this.args[1];
    if (!control)
      throw new Error(
        `ctx.${what}() needs a context made by RedisTaskTransport (or a test's own control as its second argument)`,
      );
    return control;
  }
}
