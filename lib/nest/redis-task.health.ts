import { Inject, Injectable, Optional } from '@nestjs/common';
import { HealthIndicatorService, type HealthIndicatorResult } from '@nestjs/terminus';
import { RedisTaskAdmin } from './redis-task.admin.js';
import { RedisTaskClient } from './redis-task.client.js';
import type { RedisTaskTransport } from './redis-task.transport.js';
import { outboxStatsWithin, REDIS_TASK_OUTBOX_STATS, type OutboxStatsSource } from './outbox-stats.js';

export interface RedisTaskHealthOptions {
  /** A worker to check: down unless it is listening and claiming (not stalled, not reconnecting). */
  readonly transport?: Pick<RedisTaskTransport, 'consuming' | 'currentStatus'>;
  /** Down when more tasks than this went to dead letters since the previous check. Default: not checked. */
  readonly maxDeadLetterGrowth?: number;
  /** Down when a pattern's Redis data holds faults (keys of the wrong type, values that are not numbers). */
  readonly checkFaults?: boolean;
  /** Patterns whose dead letters (and faults) are watched. Default: every pattern under the prefix. */
  readonly patterns?: readonly string[];
  /**
   * Down when the oldest row of the transactional outbox has waited longer than this (ms): its relays are
   * stuck (Redis or the database down, no relay running). Needs a `RedisTaskOutboxModule`. Default: not checked.
   */
  readonly maxOutboxLagMs?: number;
  /** Longest wait for Redis (and the outbox's database) to answer. Default 1,000 ms. */
  readonly timeoutMs?: number;
}

/**
 * A `@nestjs/terminus` health indicator (optional peer: import from `nestjs-redis-tasks/terminus`):
 * the Redis connection, a worker's consume loop, and dead-letter growth between checks.
 *
 * ```ts
 * @Get('health') @HealthCheck()
 * check() { return this.health.check([() => this.tasks.isHealthy('tasks', { transport, maxDeadLetterGrowth: 100 })]); }
 * ```
 */
@Injectable()
export class RedisTaskHealthIndicator {
  /** Dead letters counted per indicator key at the previous check. */
  // table-ok: one entry per queue
  private readonly previous = new Map<string, number>();

  constructor(
    private readonly health: HealthIndicatorService,
    private readonly client: RedisTaskClient,
    private readonly admin: RedisTaskAdmin,
    @Optional() @Inject(REDIS_TASK_OUTBOX_STATS) private readonly outbox?: OutboxStatsSource,
  ) {}

  async isHealthy<Key extends string>(
    key: Key,
    options: RedisTaskHealthOptions = {},
  ): Promise<HealthIndicatorResult<Key>> {
    const session = this.health.check(key);
    const timeoutMs = options.timeoutMs ?? 1_000;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`Redis did not answer within ${timeoutMs} ms`)), timeoutMs);
    });
    try {
      const latency = await Promise.race([this.ping(), timeout]);
      const data: Record<string, unknown> = { redis: 'up', pingMs: latency };
      let healthy = true;
      // A full Redis refuses enqueues (workers still drain it): down, saying so.
      const memory = await Promise.race([this.admin.memory(), timeout]);
      if (memory.full) {
        healthy = false;
        data.redis = 'full';
        data.message = `Redis is full (used_memory ${memory.usedBytes} of maxmemory ${memory.maxBytes}, noeviction): enqueues are refused until workers drain it or maxmemory is raised`;
      }
      if (options.transport) {
        data.worker = options.transport.currentStatus;
        healthy &&= options.transport.consuming;
      }
      if (options.maxDeadLetterGrowth !== undefined || options.checkFaults) {
        const patterns = options.patterns ?? (await Promise.race([this.admin.queues(), timeout]));
        let deadLettered = 0;
        const faults: string[] = [];
        for (const pattern of patterns) {
          const stats = await Promise.race([this.admin.stats(pattern), timeout]);
          deadLettered += stats.counters.deadLettered;
          faults.push(...stats.faults.map((fault) => `${fault.subject}: ${fault.detail}`));
        }
        if (options.checkFaults && faults.length > 0) {
          healthy = false;
          data.faults = faults;
        }
        if (options.maxDeadLetterGrowth !== undefined) {
          const growth = deadLettered - (this.previous.get(key) ?? deadLettered);
          this.previous.set(key, deadLettered);
          data.deadLetterGrowth = growth;
          if (growth > options.maxDeadLetterGrowth) {
            healthy = false;
            data.message = `${growth} task(s) went to dead letters since the last check (more than ${options.maxDeadLetterGrowth})`;
          }
        }
      }
      if (options.maxOutboxLagMs !== undefined)
        healthy = (await this.checkOutbox(options.maxOutboxLagMs, timeoutMs, data)) && healthy;
      return healthy ? session.up(data) : session.down(data);
    } catch (error) {
      return session.down({ redis: 'down', message: (error as Error).message });
    } finally {
      clearTimeout(timer);
    }
  }

  /** The outbox's state into `data`; false when its lag is past `maxLagMs` or it cannot be read. */
  private async checkOutbox(maxLagMs: number, timeoutMs: number, data: Record<string, unknown>): Promise<boolean> {
    if (!this.outbox) {
      data.outbox = 'missing';
      data.message = 'maxOutboxLagMs is set but the app has no RedisTaskOutboxModule';
      return false;
    }
    const stats = await outboxStatsWithin(this.outbox, timeoutMs);
    if ('error' in stats) {
      data.outbox = 'down';
      data.message = stats.error;
      return false;
    }
    data.outbox = { depth: stats.depth, lagMs: stats.lagMs, rejected: stats.rejected };
    if (stats.lagMs <= maxLagMs) return true;
    data.message = `the oldest outbox row has waited ${stats.lagMs} ms (more than ${maxLagMs}): are relays running and Redis up?`;
    return false;
  }

  private async ping(): Promise<number> {
    const started = performance.now();
    const redis = await this.client.connect();
    await redis.ping();
    return Math.round((performance.now() - started) * 100) / 100;
  }
}
