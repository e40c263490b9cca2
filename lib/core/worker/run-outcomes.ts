import type { TaskEnvelope } from '../model/codec.js';
import type { TaskOutcomeEvent, TaskOutcomeKind } from '../model/outcomes.js';
import { errorMessage, sleep, type TaskLogger } from '../support/logger.js';
import type { ClaimedTask } from './claimed-task.js';
import type { Completer } from './completer.js';
import type { WorkerOptions } from './worker-types.js';

const SETTLE_RETRY_MS = [50, 200, 500, 1_000];

/** What a run reports of itself: the task, its attempt and how long it ran. */
export type Ran = Omit<TaskOutcomeEvent, 'outcome' | 'workerId'>;

/**
 * The end of a run, for the runner: a fenced settle written through Redis outages (a task whose outcome
 * cannot be written stays held, neither acknowledged nor lost), and the outcome told to the listener
 * (`task` events, metrics), which may never affect the task.
 */
export class RunOutcomes {
  constructor(
    private readonly options: WorkerOptions,
    private readonly completer: Completer,
    private readonly logger: TaskLogger,
  ) {}

  /**
   * Runs a fenced settle script, retrying through Redis outages until it answers: a task whose
   * outcome cannot be written stays in this worker's processing hash, neither acknowledged nor lost.
   * Resolves false when the worker no longer holds the task (logged once).
   */
  settle(task: ClaimedTask, write: () => Promise<boolean>, envelope?: TaskEnvelope, ran?: Ran): Promise<boolean> {
    // The first try is not an async function (once per send() task): the retry loop starts at a failure.
    let written: Promise<boolean>;
    try {
      written = write();
    } catch (error) {
      written = Promise.reject(error);
    }
    return written.then(
      (settled) => {
        if (!settled) this.leaseLost(task, envelope, ran);
        return settled;
      },
      (error: unknown) => this.settleAfterFailure(task, write, error, envelope, ran),
    );
  }

  private async settleAfterFailure(
    task: ClaimedTask,
    write: () => Promise<boolean>,
    error: unknown,
    envelope?: TaskEnvelope,
    ran?: Ran,
  ): Promise<boolean> {
    for (let attempt = 0; ; attempt++) {
      if (this.completer.released) {
        this.logger.error(`could not settle a task of "${task.keys.queue}" before shutdown: ${errorMessage(error)}`);
        return false;
      }
      if (attempt === 0) {
        this.logger.error(`could not settle a task of "${task.keys.queue}" (${errorMessage(error)}); retrying`);
      }
      await sleep(SETTLE_RETRY_MS[Math.min(attempt, SETTLE_RETRY_MS.length - 1)]);
      try {
        const settled = await write();
        if (!settled) this.leaseLost(task, envelope, ran);
        return settled;
      } catch (failure) {
        error = failure;
      }
    }
  }

  leaseLost(task: ClaimedTask, envelope?: TaskEnvelope, ran?: Ran): void {
    this.report(
      'lease-lost',
      ran ?? { queue: task.keys.queue, id: envelope?.id, clientId: envelope?.clientId, attempt: 0, durationMs: 0 },
    );
    this.logger.warn(
      `task ${envelope?.id ?? task.token} of "${task.keys.queue}" is no longer held by this worker (lease lost); its outcome was discarded`,
    );
  }

  /** Whether an outcome listener is there to tell (checked before an event is built on the hot path). */
  get reporting(): boolean {
    return this.options.onOutcome !== undefined && (this.options.wantsOutcomes?.() ?? true);
  }

  /** Tells the outcome listener; a listener that throws is logged, never allowed to affect the task. */
  report(outcome: TaskOutcomeKind, ran: Ran, more?: Pick<TaskOutcomeEvent, 'reason' | 'error' | 'retryInMs'>): void {
    const onOutcome = this.options.onOutcome;
    if (!onOutcome || !this.reporting) return;
    try {
      const { queue, id, clientId, attempt, durationMs } = ran;
      onOutcome({ outcome, queue, id, clientId, attempt, durationMs, workerId: this.options.workerId, ...more });
    } catch (error) {
      this.logger.error(`a task outcome listener threw: ${errorMessage(error)}`);
    }
  }
}
