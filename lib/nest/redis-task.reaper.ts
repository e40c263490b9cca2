import { Inject, Injectable, Logger, type OnApplicationBootstrap, type OnModuleDestroy } from '@nestjs/common';
import { TaskReaper, type SweepResult } from '../core/reaper/reaper.js';
import { ReaperSchedule } from '../core/reaper/schedule.js';
import { ScheduleTicker } from '../core/schedules/ticker.js';
import { printableLogger } from '../core/support/logger.js';
import { describe } from '../core/support/describe.js';
import { answered } from '../core/admin/readiness.js';
import { REDIS_TASK_MODULE_OPTIONS, type RedisTaskModuleOptions } from './redis-task.module-definition.js';
import { RedisTaskClient } from './redis-task.client.js';
import { connectedRedis } from './ready-by.js';

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
  private closed = false;

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
    this.startOnceAnswering().catch((error: unknown) => {
      if (!this.closed) this.logger.error(`the reaper did not start: ${describe(error)}`);
    });
  }

  async onModuleDestroy(): Promise<void> {
    this.closed = true;
    // A start still waiting for Redis ends with the client's connection (closed after this): not waited for.
    await this.ticker?.close();
    this.ticker = undefined;
    await this.schedule?.stop();
    this.schedule = undefined;
  }

  private async startOnceAnswering(): Promise<void> {
    const interval = this.options.reaperIntervalMs ?? 1_000;
    // Recurring schedules fire here too (each tick still one task), unless turned off; a module whose
    // reaper only sweeps on demand fires none unless scheduleCheckMs says so.
    const checkMs = this.options.scheduleCheckMs ?? (interval === false ? false : 1_000);
    if (checkMs === false && interval === false) return;
    const redis = await connectedRedis(this.client);
    if (!(await answered(redis, () => this.closed))) return;
    if (checkMs !== false) {
      const { maxPayloadBytes, deduplicationTtlMs } = this.client.options;
      this.ticker = ScheduleTicker.forPrefix(
        redis,
        this.client.options.prefix,
        { checkMs, limits: { maxPayloadBytes, deduplicationTtlMs } },
        printableLogger(this.logger),
      );
      this.ticker.start();
    }
    if (interval === false) return;
    this.schedule = new ReaperSchedule(await this.core(), interval, () => undefined, this.logger);
    this.schedule.start();
  }

  private async core(): Promise<TaskReaper> {
    const redis = await connectedRedis(this.client);
    this.reaper ??= TaskReaper.forPrefix(redis, this.client.options.prefix, this.logger);
    return this.reaper;
  }
}
