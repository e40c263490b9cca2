import { validateDeadLetterReason, validateLeaseExtension, validateRetryDelay } from '../config/rules.js';
import { LeaseLostError } from '../model/errors.js';
import type { TaskLogger } from '../support/logger.js';
import type { ClaimedTask } from './claimed-task.js';
import type { Run } from './running.js';
import type { RunControl, WorkerOptions } from './worker-types.js';

/**
 * A handler's say over its own run (`ctx.retry()`, `ctx.deadLetter()`, `ctx.extendLease()`). Every call is
 * fenced: once the run lost its lease, was given up at shutdown, or is over, it is refused (logged, and
 * `LeaseLostError` thrown) and nothing is applied.
 */
export class HandlerControl implements RunControl {
  constructor(
    private readonly task: ClaimedTask,
    private readonly run: Run,
    private readonly taskId: string,
    private readonly options: WorkerOptions,
    private readonly released: () => boolean,
    private readonly logger: TaskLogger,
  ) {}

  retry(options?: { readonly delayMs?: number }): void {
    this.refuseUnlessHeld('retry');
    const delayMs = options?.delayMs === undefined ? undefined : validateRetryDelay('ctx.retry() delayMs', options.delayMs);
    this.run.requested = { kind: 'retry', delayMs };
  }

  deadLetter(reason: string): void {
    this.refuseUnlessHeld('deadLetter');
    this.run.requested = { kind: 'dead-letter', detail: validateDeadLetterReason('ctx.deadLetter() reason', reason) };
  }

  async extendLease(ms: number): Promise<void> {
    this.refuseUnlessHeld('extendLease');
    validateLeaseExtension('ctx.extendLease() ms', ms);
    // Fenced in Redis: the run's token must still be in this worker's processing hash.
    const held = await this.task.stillHeld(this.options.leaseMs + this.options.heartbeatIntervalMs);
    if (!held && !this.run.leaseLost) {
      this.run.leaseLost = true;
      this.run.abort.abort(new Error('the task was recovered by another process: this worker lost its lease'));
    }
    this.refuseUnlessHeld('extendLease');
    if (this.run.deadline !== undefined) this.run.deadline = Math.max(this.run.deadline, Date.now() + ms);
  }

  private refuseUnlessHeld(what: string): void {
    const why = this.run.leaseLost
      ? 'its lease was lost: another process recovered the task'
      : this.released()
        ? 'the worker gave it up at shutdown'
        : this.run.over
          ? 'the run is over'
          : undefined;
    if (why === undefined) return;
    const queue = this.task.keys.queue;
    this.logger.warn(`refused ctx.${what}() of task ${this.taskId} of "${queue}": ${why}`);
    throw new LeaseLostError(queue, this.taskId, why);
  }
}
