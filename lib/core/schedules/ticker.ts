import type { ItemLimits } from '../producer/task-items.js';
import { scheduleGatewayOf, type ScheduleGateway } from '../redis/schedule-gateway.js';
import { TaskStore } from '../redis/store.js';
import type { TaskRedis } from '../redis/scripts.js';
import { watchOf } from '../redis/connection.js';
import { errorMessage, OutageReporter, sleep, type TaskLogger } from '../support/logger.js';
import { TickFirer, type ScheduleTickEvent } from './tick-firer.js';

/** Most due schedules one check fires (more are fired by the check right after). */
const DUE_LIMIT = 100;

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

  async close(): Promise<void> {
    this.stop.abort();
    await this.done;
  }

  /** One check: fires what is due now; how long to wait before the next (ms). */
  async check(): Promise<number> {
    const { now, earliest, due } = await this.gateway.due(this.store.keys.schedules, DUE_LIMIT);
    let failed = false;
    for (const schedule of due) {
      if (this.stop.signal.aborted) break;
      try {
        for (const event of await this.firer.fire(schedule, now)) this.options.onTick?.(event);
      } catch (error) {
        failed = true;
        this.logger.error(
          `could not fire schedule "${schedule.id}": ${errorMessage(error)}; the next check tries again`,
        );
      }
    }
    // Fired: look again at once (the next ticks are now in the due set, perhaps already due).
    if (due.length > 0 && !failed) return 0;
    return earliest > now ? Math.min(this.options.checkMs, earliest - now) : this.options.checkMs;
  }

  private async run(): Promise<void> {
    while (!this.stop.signal.aborted) {
      let waitMs = this.options.checkMs;
      try {
        waitMs = await this.check();
        this.outage.succeeded();
      } catch (error) {
        this.outage.failed(error);
      }
      await sleep(waitMs, this.stop.signal);
    }
  }
}
