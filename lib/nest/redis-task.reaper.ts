import { Inject, Injectable, Logger, type OnApplicationBootstrap, type OnModuleDestroy } from '@nestjs/common';
import { TaskReaper, type SweepResult } from '../core/reaper/reaper.js';
import { ReaperSchedule } from '../core/reaper/schedule.js';
import { ScheduleTicker } from '../core/schedules/ticker.js';
import { ScheduleListener } from '../core/schedules/schedule-listener.js';
import { printableLogger } from '../core/support/logger.js';
import { describe } from '../core/support/describe.js';
import { answered } from '../core/admin/readiness.js';
import { REDIS_TASK_MODULE_OPTIONS, type RedisTaskModuleOptions } from './redis-task.module-definition.js';
import { RedisTaskClient } from './redis-task.client.js';
import { connectedRedis } from './ready-by.js';
import type { TaskAdminRedis } from '../core/admin/admin.js';

/** The longest wait between two checks for due schedules of a reaper that hears stored ones (ms). */
const SCHEDULE_BACKSTOP_MS = 60_000;
/** ... and of one that cannot hear them (its subscription refused). */
const UNHEARD_CHECK_MS = 1_000;

/**
 * Recovers tasks of dead or hung workers (their lease expired) and promotes due retries, for every
 * pattern under the prefix. Registered by `RedisTaskModule`; runs every `reaperIntervalMs` (default
 * 1 s) and can be called directly with `sweep()`. Safe to run in many processes at once.
 */
@Injectable()
export class RedisTaskReaper implements OnApplicationBootstrap, OnModuleDestroy {
  private readonly logger = new Logger(RedisTaskReaper.name);
  private schedule: ReaperSchedule | undefined;
  private reaper: TaskReaper | undefined;
  private ticker: ScheduleTicker | undefined;
  private listener: ScheduleListener | undefined;
  private closed = false;
  /** Aborted on close: cuts a schedule subscription still waiting for Redis. */
  private stopping = new AbortController();

  constructor(
    private readonly client: RedisTaskClient,
    @Inject(REDIS_TASK_MODULE_OPTIONS) private readonly options: RedisTaskModuleOptions,
  ) {}

  /** One sweep over every pattern that has had a worker: what it recovered, promoted, dead-lettered. */
  async sweep(): Promise<SweepResult> {
    return (await this.core()).sweep();
  }

  /**
   * Nothing in Nest's bootstrap waits for Redis: the schedule ticker and the sweeps start once Redis answers
   * (at once when it does), as a worker does; an app started with Redis down serves in the meantime.
   */
  onApplicationBootstrap(): void {
    this.closed = false;
    this.stopping = new AbortController();
    this.startOnceAnswering().catch((error: unknown) => {
      if (!this.closed) this.logger.error(`the reaper did not start: ${describe(error)}`);
    });
  }

  async onModuleDestroy(): Promise<void> {
    this.closed = true;
    this.stopping.abort();
    // A start still waiting for Redis ends with the client's connection (closed after this): not waited for.
    await this.ticker?.close();
    this.ticker = undefined;
    await this.listener?.close();
    this.listener = undefined;
    await this.schedule?.stop();
    this.schedule = undefined;
  }

  private async startOnceAnswering(): Promise<void> {
    const interval = this.options.reaperIntervalMs ?? 1_000;
    // Recurring schedules fire here too (each tick still one task), unless turned off; a module whose
    // reaper only sweeps on demand fires none unless scheduleCheckMs says so.
    const checkMs = this.options.scheduleCheckMs ?? (interval === false ? false : SCHEDULE_BACKSTOP_MS);
    if (checkMs === false && interval === false) return;
    const redis = await connectedRedis(this.client);
    if (!(await answered(redis, () => this.closed))) return;
    if (checkMs !== false) await this.startTicker(redis, checkMs);
    if (interval === false || this.closed) return;
    this.schedule = new ReaperSchedule(await this.core(), interval, () => undefined, this.logger);
    this.schedule.start();
  }

  /**
   * The schedule ticker, woken by a listener when a schedule is stored or resumed: with nothing due it asks
   * Redis nothing but its backstop check (`checkMs`). A listener refused (an ACL without SUBSCRIBE on the
   * prefix's channels) leaves a ticker that asks every second, as it did before listening.
   */
  private async startTicker(redis: TaskAdminRedis, checkMs: number): Promise<void> {
    let wakeMs = checkMs;
    try {
      const wake = () => this.ticker?.wake();
      this.listener = await ScheduleListener.forPrefix(redis, this.client.options.prefix, wake, this.stopping.signal);
    } catch (error) {
      if (this.closed) return;
      wakeMs = Math.min(checkMs, UNHEARD_CHECK_MS);
      this.logger.warn(`cannot hear stored schedules (${describe(error)}): checking for due ones every ${wakeMs} ms`);
    }
    if (this.closed) return;
    const { maxPayloadBytes, deduplicationTtlMs } = this.client.options;
    this.ticker = ScheduleTicker.forPrefix(
      redis,
      this.client.options.prefix,
      { checkMs: wakeMs, limits: { maxPayloadBytes, deduplicationTtlMs } },
      printableLogger(this.logger),
    );
    this.ticker.start();
  }

  private async core(): Promise<TaskReaper> {
    const redis = await connectedRedis(this.client);
    this.reaper ??= TaskReaper.forPrefix(redis, this.client.options.prefix, this.logger);
    return this.reaper;
  }
}
