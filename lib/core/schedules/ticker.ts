import type { ItemLimits } from '../producer/task-items.js';
import { scheduleGatewayOf, type ScheduleGateway } from '../redis/schedule-gateway.js';
import { TaskStore } from '../redis/store.js';
import type { TaskRedis } from '../redis/scripts.js';
import { watchOf } from '../redis/connection.js';
import { unlessAborted } from '../support/abortable.js';
import { errorMessage, OutageReporter, sleep, type TaskLogger } from '../support/logger.js';
import { TickFirer, type ScheduleTickEvent } from './tick-firer.js';

/** Most due schedules one check fires (more are fired by the check right after). */
const DUE_LIMIT = 100;
/** Longest random delay added to a wait, so processes waking for one tick do not all fire it. */
const MAX_JITTER_MS = 20;

export interface TickerOptions {
  /** Longest wait between two checks of the due set (ms): an idle process asks Redis this often. */
  readonly checkMs: number;
  readonly limits: ItemLimits;
  /** Each tick's outcome, told by the one process that moved its schedule on. */
  readonly onTick?: (event: ScheduleTickEvent) => void;
}

/**
 * Fires the recurring schedules of a prefix from one process. Every worker and reaper process runs one;
 * they need no lock or leader: each check reads the due schedules by Redis time (one read-only script
 * call) and fires them through TickFirer, which makes each tick one task whoever else fires it. Between
 * checks it sleeps until the earliest next tick, at most `checkMs` (an idle process makes one call per
 * `checkMs`, whatever the number of schedules).
 */
export class ScheduleTicker {
  private readonly stop = new AbortController();
  private done: Promise<void> | undefined;
  private readonly gateway: ScheduleGateway;
  private readonly firer: TickFirer;
  private readonly outage: OutageReporter;

  constructor(
    private readonly store: TaskStore,
    private readonly options: TickerOptions,
    private readonly logger: TaskLogger,
  ) {
    this.gateway = scheduleGatewayOf(store.redis);
    this.firer = new TickFirer(store, options.limits, logger);
    const watch = watchOf(store.redis);
    this.outage = new OutageReporter(logger, 'firing recurring schedules', () => watch.downSince);
  }

  /** A ticker over a prefix whose queues' shard counts are read from their record (a reaper process's). */
  static forPrefix(redis: TaskRedis, prefix: string, options: TickerOptions, logger: TaskLogger): ScheduleTicker {
    return new ScheduleTicker(TaskStore.recorded(redis, prefix), options, logger);
  }

  start(): void {
    this.done ??= this.run();
  }

  /** Stops checking; resolves at once, without waiting for a Redis command under way. */
  async close(): Promise<void> {
    this.stop.abort();
    await this.done;
  }

  /** One check: fires what is due now; how long to wait before the next (ms). */
  private async check(): Promise<number> {
    const { now, later, due } = await this.gateway.due(this.store.keys.schedules, DUE_LIMIT);
    let failed = false;
    // The earliest tick waiting after this check: the ones not due yet, and the next of each fired now.
    let next = later > 0 ? later : Number.POSITIVE_INFINITY;
    for (const schedule of due) {
      if (this.stop.signal.aborted) break;
      try {
        const fired = await this.firer.fire(schedule, now);
        for (const event of fired.events) this.options.onTick?.(event);
        if (fired.next !== undefined) next = Math.min(next, fired.next);
      } catch (error) {
        failed = true;
        this.logger.error(
          `could not fire schedule "${schedule.id}": ${errorMessage(error)}; the next check tries again`,
        );
      }
    }
    if (failed) return this.options.checkMs;
    // More were due than one check takes: look again at once.
    if (due.length === DUE_LIMIT) return 0;
    // Every process wakes for the same tick: a few ms of jitter let the first one fire it while the others
    // find it moved on (one read each) instead of all firing it (the second and third find the record).
    const jitter = Math.random() * Math.min(MAX_JITTER_MS, this.options.checkMs / 10);
    return Math.max(0, Math.min(this.options.checkMs, next - now) + jitter);
  }

  private async run(): Promise<void> {
    while (!this.stop.signal.aborted) {
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
      await sleep(waitMs, this.stop.signal);
    }
  }
}
