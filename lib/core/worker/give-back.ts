import type { QueueKeys } from '../redis/keys.js';
import { requeueProcessing } from '../redis/requeue.js';
import type { TaskRedis } from '../redis/scripts.js';
import { errorMessage, type TaskLogger } from '../support/logger.js';
import type { ClaimedTask } from './claimed-task.js';
import type { RunningTasks } from './running.js';
import type { WorkerOptions } from './worker-types.js';

/**
 * Returns tasks a worker will not finish to the heads of their clients' lists: what is unfinished at
 * shutdown, what a claim took with no free slot to run it, and a task whose run hit an internal error.
 * Each is a fenced requeue; when Redis fails, the tasks stay in the worker's processing hash, where the
 * orphan check, a restart with the same id or the reaper finds them. Nothing is lost, only late.
 */
export class GiveBack {
  constructor(
    private readonly redis: TaskRedis,
    private readonly options: WorkerOptions,
    private readonly running: RunningTasks,
    private readonly logger: TaskLogger,
  ) {}

  /** Shutdown: returns a shard's unfinished tasks to their queue and deregisters from it. */
  async onShutdown(keys: QueueKeys, now: number): Promise<void> {
    try {
      // A run that went on past slowRunMs counts as an attempt: a task that hangs every run must end in
      // dead letters, not come back after every restart. Shorter runs (a deploy) count nothing.
      const long = this.running.longRunning(keys, now, this.options.slowRunMs);
      const counted =
        long.length === 0
          ? { requeued: 0 }
          : await requeueProcessing(this.redis, keys, this.options, {
              countAttempt: true,
              tokens: long,
              logger: this.logger,
            });
      const first = await requeueProcessing(this.redis, keys, this.options, {
        countAttempt: false,
        logger: this.logger,
      });
      await this.redis.zrem(keys.workers, this.options.workerId);
      // A claim sent just before close() may have run with its reply lost (the loop stopped waiting for it).
      // The claim script refuses an unregistered worker, so after the ZREM nothing more can land: one
      // more sweep returns whatever such a claim took.
      const late = await requeueProcessing(this.redis, keys, this.options, {
        countAttempt: false,
        logger: this.logger,
      });
      const requeued = first.requeued + late.requeued;
      if (requeued + counted.requeued > 0) {
        this.logger.warn(
          `returned ${requeued + counted.requeued} unfinished task(s) of "${keys.queue}" to their queue on shutdown` +
            (counted.requeued > 0 ? ` (${counted.requeued} had run past slowRunMs: attempt counted)` : ''),
        );
      }
      await this.redis.hdel(keys.heartbeats, this.options.workerId);
    } catch (error) {
      // The tasks stay in this worker's processing hash: a restart with the same id, or recovery of
      // a dead worker, returns them. Nothing is lost, so shutdown goes on.
      this.logger.error(`could not return unfinished tasks of "${keys.queue}" on shutdown: ${errorMessage(error)}`);
    }
  }

  /**
   * Returns tasks claimed with no free slot to run them (token, entry, ...) to the heads of their lists,
   * uncounted, from the entries the claim returned: the requeue is sent at once, so the loop's next claim
   * finds them back in order. If Redis fails, the orphan check returns them.
   */
  async unstarted(keys: QueueKeys, pairs: readonly string[]): Promise<void> {
    const entries: Record<string, string> = {};
    for (let i = 0; i < pairs.length; i += 2) entries[pairs[i]] = pairs[i + 1];
    try {
      await requeueProcessing(this.redis, keys, this.options, { countAttempt: false, entries, logger: this.logger });
    } catch (error) {
      this.logger.warn(
        `could not return ${pairs.length / 2} task(s) of "${keys.queue}" claimed with no free slot: ${errorMessage(error)}; the orphan check returns them`,
      );
    }
  }

  /**
   * A bug of ours ended a run: the task goes back to its queue with this run counted as an attempt (so
   * the worst case is a dead letter, never a task that runs for ever). Fenced on the token.
   */
  afterInternalError(task: ClaimedTask): void {
    requeueProcessing(this.redis, task.keys, this.options, {
      countAttempt: true,
      tokens: [task.token],
      logger: this.logger,
    }).catch((failure: unknown) => {
      this.logger.warn(
        `could not return a task of "${task.keys.queue}" after an internal error (${errorMessage(failure)}); the orphan check returns it`,
      );
    });
  }
}
