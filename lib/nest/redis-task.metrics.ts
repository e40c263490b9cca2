import { Inject, Injectable, Optional } from '@nestjs/common';
import { Counter, Gauge, Histogram, register as defaultRegistry, type Registry } from 'prom-client';
import type { QueueStats, ScheduleInfo } from '../core/admin/admin.js';
import type { TaskOutcomeEvent } from '../core/model/outcomes.js';
import { RedisTaskAdmin } from './redis-task.admin.js';
import type { RedisTaskTransport } from './redis-task.transport.js';
import { registerOutboxMetrics } from './outbox-metrics.js';
import { REDIS_TASK_OUTBOX_STATS, type OutboxStatsSource } from './outbox-stats.js';

export const REDIS_TASK_METRICS_OPTIONS = Symbol('REDIS_TASK_METRICS_OPTIONS');

export interface RedisTaskMetricsOptions {
  /** Where the metrics are registered. Default: prom-client's global registry. */
  readonly registry?: Registry;
  /** Prefix of every metric name. Default `redis_tasks_`. */
  readonly namePrefix?: string;
  /** Patterns whose depth is reported. Default: every pattern that has had a worker under the prefix. */
  readonly patterns?: readonly string[];
  /** How long one read of the queue stats from Redis serves the gauges (of one scrape). Default 1,000 ms. */
  readonly statsTtlMs?: number;
  /**
   * Longest a scrape waits for Redis (ms). Default 2,000: past it (or when Redis is down) the gauges show
   * the last values read and `redis_up` is 0, instead of the scrape failing or hanging.
   */
  readonly scrapeTimeoutMs?: number;
}

/**
 * Prometheus metrics (prom-client, an optional peer: import from `nestjs-redis-tasks/metrics`).
 * Queue gauges are read from Redis when scraped: depth, in flight, delayed, dead letters, oldest pending
 * age, paused. Handler durations and outcomes come from the transports passed to `observe()`. With a
 * `RedisTaskOutboxModule` in the app, the outbox's depth, lag, rejected rows and relayed count too.
 *
 * ```ts
 * @Module({ imports: [RedisTaskModule.forRoot({})], providers: [RedisTaskMetrics] })
 * // main.ts: app.get(RedisTaskMetrics).observe(transport)
 * ```
 */
@Injectable()
export class RedisTaskMetrics {
  readonly registry: Registry;
  private readonly duration: Histogram<'queue' | 'outcome'>;
  private readonly outcomes: Counter<'queue' | 'outcome'>;
  private readonly progress: Counter<'queue'>;
  private stats: { at: number; value: Promise<QueueStats[]> } | undefined;
  /** The last stats read, served while Redis cannot be read (a scrape must answer in time, not fail whole). */
  private lastGood: QueueStats[] = [];
  private lastSchedules: ScheduleInfo[] = [];
  /** Whether the last read of the stats succeeded (the `redis_up` gauge). */
  private up = true;

  constructor(
    private readonly admin: RedisTaskAdmin,
    @Optional() @Inject(REDIS_TASK_METRICS_OPTIONS) private readonly options: RedisTaskMetricsOptions = {},
    /** The app's transactional outbox (RedisTaskOutboxModule): its gauges too. */
    @Optional() @Inject(REDIS_TASK_OUTBOX_STATS) outbox?: OutboxStatsSource,
  ) {
    this.registry = options.registry ?? defaultRegistry;
    const name = (suffix: string) => `${options.namePrefix ?? 'redis_tasks_'}${suffix}`;
    this.queueGauges(name);
    this.duration = this.metric(
      name('handler_duration_seconds'),
      () =>
        new Histogram({
          name: name('handler_duration_seconds'),
          help: 'How long handlers ran, per pattern and outcome',
          labelNames: ['queue', 'outcome'],
          buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120],
          registers: [this.registry],
        }),
    );
    this.outcomes = this.metric(
      name('outcomes_total'),
      () =>
        new Counter({
          name: name('outcomes_total'),
          help: 'Task runs by outcome (completed, retried, dead-lettered, lease-lost, cancelled, replaced), per pattern',
          labelNames: ['queue', 'outcome'],
          registers: [this.registry],
        }),
    );
    this.progress = this.metric(
      name('progress_reports_total'),
      () =>
        new Counter({
          name: name('progress_reports_total'),
          help: 'Progress values handlers reported (ctx.progress()) and Redis took, per pattern',
          labelNames: ['queue'],
          registers: [this.registry],
        }),
    );
    this.scheduleTicks(name('schedule_ticks_total'));
    this.batchCounters(name('batches_total'));
    this.flowCounters(name('flows_total'));
    if (outbox) registerOutboxMetrics(this.registry, name, () => this.inTime(outbox.stats()));
  }

  /** The per-pattern gauges read from the queue stats, and whether Redis could be read and is full. */
  private queueGauges(name: (suffix: string) => string): void {
    // The collect callbacks run with the gauge as `this`; they reach this instance through a closure.
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const metrics = this;
    const gauge = (suffix: string, help: string, read: (stats: QueueStats) => number) =>
      this.metric(
        name(suffix),
        () =>
          new Gauge({
            name: name(suffix),
            help,
            labelNames: ['queue'],
            registers: [this.registry],
            collect: async function collect(this: Gauge<'queue'>) {
              this.reset();
              for (const stats of await metrics.currentStats()) this.set({ queue: stats.queue }, read(stats));
            },
          }),
      );
    gauge('queue_depth', 'Tasks pending (ready to claim) per pattern', (s) => s.pending.total);
    gauge('in_flight', 'Tasks claimed by workers and not yet settled, per pattern', (s) => s.inFlight.total);
    gauge('delayed', 'Tasks waiting for a due time (delays and retry backoffs), per pattern', (s) => s.delayed);
    gauge('dead_letters', 'Tasks in dead letters, per pattern', (s) => s.deadLetters);
    gauge(
      'oldest_pending_age_seconds',
      'Age of the oldest pending task, per pattern (0 when none)',
      (s) => (s.oldestPendingAgeMs ?? 0) / 1000,
    );
    gauge('paused', '1 while the pattern is paused', (s) => (s.paused ? 1 : 0));
    this.metric(
      name('redis_up'),
      () =>
        new Gauge({
          name: name('redis_up'),
          help: '1 when the last read of the queue stats from Redis succeeded in time, 0 when Redis could not be read (the other gauges then show the last values read)',
          registers: [this.registry],
          collect: async function collect(this: Gauge) {
            await metrics.currentStats();
            this.set(metrics.up ? 1 : 0);
          },
        }),
    );
    this.metric(
      name('redis_full'),
      () =>
        new Gauge({
          name: name('redis_full'),
          help: '1 while Redis is full (maxmemory reached with noeviction: enqueues are refused, workers keep draining), 0 otherwise or when INFO is not allowed',
          registers: [this.registry],
          collect: async function collect(this: Gauge) {
            const memory = await metrics.inTime(metrics.admin.memory());
            this.set(memory?.full ? 1 : 0);
          },
        }),
    );
  }

  /** Ticks of each recurring schedule by outcome, as recorded in Redis. */
  private scheduleTicks(name: string): void {
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const metrics = this;
    this.metric(
      name,
      () =>
        new Counter({
          name: name,
          help: 'Ticks of each recurring schedule by outcome (fired: a task written; skipped: its previous task still lived, overlap skip; missed: passed while no process ran; held: no worker or producer had used the pattern yet), as recorded in Redis by whichever process handled them',
          labelNames: ['schedule', 'outcome'],
          registers: [this.registry],
          collect: async function collect(this: Counter<'schedule' | 'outcome'>) {
            const schedules = await metrics.currentSchedules();
            this.reset();
            for (const { id, state } of schedules) {
              for (const outcome of ['fired', 'skipped', 'missed', 'held'] as const) {
                const count = state[outcome] ?? 0;
                if (count > 0) this.inc({ schedule: id, outcome }, count);
              }
            }
          },
        }),
    );
  }

  /** Batches opened and completed, as counted in Redis. */
  private batchCounters(name: string): void {
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const metrics = this;
    this.metric(
      name,
      () =>
        new Counter({
          name,
          help: 'Batches opened and completed (their callbacks enqueued) under the prefix, as counted in Redis by every process',
          labelNames: ['outcome'],
          registers: [this.registry],
          collect: async function collect(this: Counter<'outcome'>) {
            const counts = await metrics.inTime(metrics.admin.batchCounts());
            if (!counts) return;
            this.reset();
            this.inc({ outcome: 'opened' }, counts.opened);
            this.inc({ outcome: 'completed' }, counts.completed);
          },
        }),
    );
  }

  /** Flows created and ended (by state), as counted in Redis. */
  private flowCounters(name: string): void {
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const metrics = this;
    this.metric(
      name,
      () =>
        new Counter({
          name,
          help: 'Flows created and ended (succeeded, failed, cancelled) under the prefix, as counted in Redis (each once)',
          labelNames: ['outcome'],
          registers: [this.registry],
          collect: async function collect(this: Counter<'outcome'>) {
            const counts = await metrics.inTime(metrics.admin.flowCounts());
            if (!counts) return;
            this.reset();
            for (const outcome of ['created', 'succeeded', 'failed', 'cancelled'] as const) {
              this.inc({ outcome }, counts[outcome]);
            }
          },
        }),
    );
  }

  /** Counts the outcomes and handler durations of a transport's tasks. */
  observe(transport: Pick<RedisTaskTransport, 'on'>): void {
    transport.on('task', (event) => this.record(event));
    transport.on('progress', (event) => this.progress.inc({ queue: event.queue }));
  }

  /** Records one outcome (what `observe()` does for each task event). */
  record(event: TaskOutcomeEvent): void {
    this.outcomes.inc({ queue: event.queue, outcome: event.outcome });
    if (event.durationMs > 0) {
      this.duration.observe({ queue: event.queue, outcome: event.outcome }, event.durationMs / 1000);
    }
  }

  /**
   * The stats for a scrape, read within `scrapeTimeoutMs` (default 2,000): on a failure or past the
   * timeout, the last values read (and `redis_up` 0). Never rejects, so a scrape answers while Redis is down.
   */
  private async currentStats(): Promise<QueueStats[]> {
    const read = await this.inTime(this.queueStats());
    this.up = read !== undefined;
    if (read) this.lastGood = read;
    return this.lastGood;
  }

  /** The schedules for a scrape, read within `scrapeTimeoutMs`: on a failure or past it, the last ones read. */
  private async currentSchedules(): Promise<ScheduleInfo[]> {
    const read = await this.inTime(this.admin.listSchedules());
    if (read) this.lastSchedules = read;
    return this.lastSchedules;
  }

  /** What `read` resolves to within `scrapeTimeoutMs` (default 2,000), or undefined on a failure or past it. */
  private inTime<T>(read: Promise<T>): Promise<T | undefined> {
    return within(read, this.options.scrapeTimeoutMs ?? 2_000);
  }

  private queueStats(): Promise<QueueStats[]> {
    if (!this.stats || Date.now() - this.stats.at > (this.options.statsTtlMs ?? 1_000)) {
      const value = (async () => {
        const patterns = this.options.patterns ?? (await this.admin.queues());
        return Promise.all(patterns.map((pattern) => this.admin.stats(pattern)));
      })();
      this.stats = { at: Date.now(), value };
      value.catch(() => (this.stats = undefined));
    }
    return this.stats.value;
  }

  /** A metric of this name already in the registry (a second instance, a hot reload), or a new one. */
  private metric<T>(name: string, create: () => T): T {
    return (this.registry.getSingleMetric(name) as T | undefined) ?? create();
  }
}

/** What `read` resolves to within `timeoutMs`, or undefined on a failure or past it. */
async function within<T>(read: Promise<T>, timeoutMs: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), timeoutMs);
  });
  try {
    return await Promise.race([read.catch(() => undefined), late]);
  } finally {
    clearTimeout(timer);
  }
}
