import { settledBy, type TaskLogger } from '../support/logger.js';
import type { SweepResult, TaskReaper } from './reaper.js';

/** Longest stop() waits for a sweep under way (an outage does not hold a deploy). */
const STOP_WAIT_MS = 2_000;

/** What the schedule drives: a TaskReaper (or anything that sweeps and promotes alike). */
export type Sweeper = Pick<TaskReaper, 'sweep' | 'sweepInTurn' | 'promote' | 'clockOffsetMs'>;

/**
 * Runs a reaper on an interval (unless `intervalMs` is false), and promotes delayed tasks at their due
 * time in between: a timer is set for the earliest due time known (from each promotion, from this
 * worker's own retries, and from producers announcing a new earliest delayed task), so a delayed task
 * does not wait for the next interval.
 */
export class ReaperSchedule {
  private interval: NodeJS.Timeout | undefined;
  private dueTimer: NodeJS.Timeout | undefined;
  private dueAt: number | undefined;
  private running: Promise<unknown> | undefined;
  private stopped = false;

  constructor(
    private readonly reaper: Sweeper,
    private readonly intervalMs: number | false,
    private readonly queues: () => readonly string[] | undefined,
    private readonly logger?: TaskLogger,
  ) {}

  start(): void {
    if (this.intervalMs === false) {
      void this.run(() => this.promote());
      return;
    }
    const intervalMs = this.intervalMs;
    // Every process of the deployment ticks; the one whose turn it is sweeps every queue of the prefix.
    this.interval = setInterval(() => void this.run(() => this.reaper.sweepInTurn(intervalMs)), intervalMs);
    this.interval.unref();
    void this.run(() => this.reaper.sweep(this.queues()));
  }

  /** A delayed task is due at `dueAt` (Redis clock, ms): promote it then rather than at the next interval. */
  wakeAt(dueAt: number): void {
    if (this.stopped || !Number.isFinite(dueAt) || (this.dueAt !== undefined && this.dueAt <= dueAt)) {
      return;
    }
    clearTimeout(this.dueTimer);
    this.dueAt = dueAt;
    const wait = dueAt - (Date.now() + this.reaper.clockOffsetMs);
    this.dueTimer = setTimeout(
      () => {
        this.dueAt = undefined;
        void this.run(() => this.promote());
      },
      // At least 1 ms: a clock offset measured a little off must not turn this into a busy loop.
      Math.max(1, wait),
    );
    this.dueTimer.unref();
  }

  /**
   * Stops the schedule; waits for a sweep under way, but no longer than `waitMs`: during an outage a
   * sweep's commands wait for Redis, and a deploy must not wait with them. Everything a sweep does is a
   * script that moves only what is still there, so one cut short is simply done by the next reaper.
   */
  async stop(waitMs = STOP_WAIT_MS): Promise<void> {
    this.stopped = true;
    clearInterval(this.interval);
    clearTimeout(this.dueTimer);
    if (this.running) await settledBy(this.running, Date.now() + waitMs);
  }

  private promote(): Promise<SweepResult> {
    const queues = this.queues();
    return queues ? this.reaper.promote(queues) : this.reaper.sweep();
  }

  private async run(work: () => Promise<SweepResult | undefined>): Promise<void> {
    if (this.stopped) {
      return;
    }
    const previous = this.running;
    const current = (async () => {
      await previous;
      if (this.stopped) return;
      try {
        const result = await work();
        if (result?.nextDueAt !== undefined) {
          this.wakeAt(result.nextDueAt);
        }
      } catch (error) {
        this.logger?.error(`reaper sweep failed: ${(error as Error).message}`);
      }
    })();
    this.running = current;
    await current;
  }
}
