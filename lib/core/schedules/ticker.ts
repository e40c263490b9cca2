import type { ItemLimits } from '../producer/task-items.js';
import { TAKE_LEASE_MS, type ScheduleGateway } from '../redis/schedule-gateway.js';
import { TaskStore } from '../redis/store.js';
import type { TaskRedis } from '../redis/scripts.js';
import { unlessAborted } from '../support/abortable.js';
import { errorMessage, OutageReporter, sleep, type TaskLogger } from '../support/logger.js';
import { TickFirer, type ScheduleTickEvent } from './tick-firer.js';

/** Most due schedules one check takes and fires at once (more are taken by the check right after). */
const DUE_LIMIT = 200;
/** Longest random delay added to a wait, so processes waking for one tick do not all fire it. */
const MAX_JITTER_MS = 20;

export interface TickerOptions {
  /**
   * Longest wait between two checks of the due set (ms). A ticker that hears stored schedules (`wake`) sleeps
   * until the earliest tick it knows, so this is only its backstop; one that does not asks Redis this often.
   */
  readonly checkMs: number;
  readonly limits: ItemLimits;
  /** Each tick's outcome, told by the one process that moved its schedule on. */
  readonly onTick?: (event: ScheduleTickEvent) => void;
}

/**
 * Fires the recurring schedules of a prefix from one process. Every worker and reaper process runs one;
 * they need no lock or leader: each check takes a slice of the due schedules by Redis time (one script
 * call; a slice is this process's for a lease of a few seconds, so processes share a long list instead of
 * repeating each other) and fires them through TickFirer, which makes each tick one task whoever fires it. Between
 * checks it sleeps until the earliest next tick, at most `checkMs`; a worker's ticker is woken when a schedule
 * is stored or resumed (`wake`), so with nothing due it sends nothing but its backstop check.
 */
export class ScheduleTicker {
  private readonly stop = new AbortController();
  private done: Promise<void> | undefined;
  private readonly gateway: ScheduleGateway;
  private readonly firer: TickFirer;
  private readonly outage: OutageReporter;
  /** Ends the sleep between two checks (a schedule was stored or resumed). */
  private nap: AbortController | undefined;
  /** A wake came during a check: the next one follows at once. */
  private woken = false;

  constructor(
    private readonly store: TaskStore,
    private readonly options: TickerOptions,
    private readonly logger: TaskLogger,
  ) {
    this.gateway = store.gateway.schedules;
    this.firer = new TickFirer(store, options.limits, logger);
    const watch = store.watch;
    this.outage = new OutageReporter(logger, 'firing recurring schedules', () => watch.downSince);
  }

  /** A ticker over a prefix whose queues' shard counts are read from their record (a reaper process's). */
  static forPrefix(redis: TaskRedis, prefix: string, options: TickerOptions, logger: TaskLogger): ScheduleTicker {
    return new ScheduleTicker(TaskStore.recorded(redis, prefix), options, logger);
  }

  start(): void {
    this.done ??= this.run();
  }

  /**
   * A schedule was stored or resumed (heard on the process's subscriber, or the subscriber is back after a
   * reconnection and may have missed one): check now rather than at the earliest tick known.
   */
  wake(): void {
    this.woken = true;
    this.nap?.abort();
  }

  /** Stops checking; resolves at once, without waiting for a Redis command under way. */
  async close(): Promise<void> {
    this.stop.abort();
    await this.done;
  }

  /**
   * One check: takes a slice of what is due now (processes checking at once take disjoint slices) and fires
   * it, every schedule of the slice at once (their commands pipelined on the connection); how long to wait
   * before the next check (ms).
   */
  private async check(): Promise<number> {
    const { now, later, run, due } = await this.gateway.take(this.store.keys.schedules, DUE_LIMIT);
    const take = TickFirer.context(now, run);
    let failed = false;
    // The earliest tick waiting after this check: the ones not due yet, and the next of each fired now.
    let next = later > 0 ? later : Number.POSITIVE_INFINITY;
    await Promise.all(
      due.map(async (schedule) => {
        if (this.stop.signal.aborted) return;
        try {
          const fired = await this.firer.fire(schedule, take);
          for (const event of fired.events) this.options.onTick?.(event);
          if (fired.next !== undefined) next = Math.min(next, fired.next);
        } catch (error) {
          // Its take's lease ends in a few seconds: then this process or another fires it from the same tick.
          failed = true;
          // Closing cut it short (the connection closed under it): not an error of the schedule.
          const report = this.stop.signal.aborted
            ? this.logger.log.bind(this.logger)
            : this.logger.error.bind(this.logger);
          report(
            `could not fire schedule "${schedule.id}"${this.stop.signal.aborted ? ' while closing' : ''}: ${errorMessage(error)}; it is fired again once its take's lease ends`,
          );
        }
      }),
    );
    if (failed) return Math.min(this.options.checkMs, TAKE_LEASE_MS);
    // More were due than one take holds: take the next slice at once.
    if (due.length === DUE_LIMIT) return 0;
    // Every process wakes for the same tick: a few ms of jitter let the first one take it while the others
    // find nothing due (one call each).
    const jitter = Math.random() * Math.min(MAX_JITTER_MS, this.options.checkMs / 10);
    return Math.max(0, Math.min(this.options.checkMs, next - now) + jitter);
  }

  private async run(): Promise<void> {
    while (!this.stop.signal.aborted) {
      this.woken = false;
      let waitMs = this.options.checkMs;
      try {
        // close() does not wait for Redis: a check cut short in an outage is finished, or not, by the
        // next firer (a tick's write and its advance are idempotent).
        const checked = await unlessAborted(this.check(), this.stop.signal);
        if (checked === undefined) break;
        waitMs = checked;
        this.outage.succeeded();
      } catch (error) {
        this.outage.failed(error);
      }
      if (this.woken) continue;
      this.nap = new AbortController();
      await sleep(waitMs, AbortSignal.any([this.stop.signal, this.nap.signal]));
      this.nap = undefined;
    }
  }
}
