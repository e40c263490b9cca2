import type { TaskOutcomeEvent } from '../model/outcomes.js';
import { reaperSettings, type ResolvedTransportOptions } from '../config/options.js';
import type { PatternSettings } from '../config/pattern-settings.js';
import { openBlockingConnection, quit } from '../redis/connection.js';
import { PrefixKeys } from '../redis/keys.js';
import { QueueLayouts } from '../redis/layouts.js';
import { TaskStore } from '../redis/store.js';
import { FlowFolder } from '../flows/flow-folder.js';
import type { RedisConnection, TaskRedis } from '../redis/scripts.js';
import { TaskReaper, type SweepResult } from '../reaper/reaper.js';
import { ReaperSchedule } from '../reaper/schedule.js';
import { settledBy, type TaskLogger } from '../support/logger.js';
import type { TaskTracing } from '../support/tracing.js';
import type { ScheduleSpec } from '../model/schedule.js';
import { ScheduleBook } from '../schedules/schedule-book.js';
import { SCHEDULE_LIMITS, type ScheduleTickEvent } from '../schedules/tick-firer.js';
import { ScheduleTicker } from '../schedules/ticker.js';
import { SubscriberWatch, subscriberSocket } from './subscriber-watch.js';
import { WakeSignals } from './wake-signals.js';
import { waitsOnItsBell } from './idle-wait.js';
import { TaskWorker } from './worker.js';
import type { TaskExecutor, TaskProgressEvent } from './worker-types.js';

/** Longest close waits for a reaper sweep under way. */
const SCHEDULE_STOP_MS = 2_000;

/** What the runtime tells the adapter above it. */
export interface RuntimeHooks {
  /** Runs a task's handler (the Nest adapter, in this package). */
  readonly executor: TaskExecutor;
  /** The watchdog found Redis stopped answering (true), or answering again (false). */
  readonly onStall?: (stalled: boolean) => void;
  /** How each run ended; never given the payload. */
  readonly onOutcome?: (event: TaskOutcomeEvent) => void;
  /** Whether `onOutcome` has anyone to tell right now (false: no event is built per run). */
  readonly wantsOutcomes?: () => boolean;
  /** Each progress value a handler reported, once Redis took it. */
  readonly onProgress?: (event: TaskProgressEvent) => void;
  /** OpenTelemetry, when on and installed (`loadTracing`). */
  readonly tracing?: TaskTracing;
  /** The schedules this worker's code declares (`@TaskSchedule`), stored when it starts. */
  readonly schedules?: readonly DeclaredSchedule[];
  /** Each schedule tick this process fired (told once per tick, by one process). */
  readonly onScheduleTick?: (event: ScheduleTickEvent) => void;
}

/** A schedule declared in code, on the handler of its pattern. */
export interface DeclaredSchedule {
  readonly id: string;
  readonly spec: ScheduleSpec;
}

/**
 * The composition root of a worker process, and the owner of its start order: given a connection that
 * answers and a checked server, it checks the patterns' shard counts, sets up the reaper and its
 * schedule, subscribes to due times and resumes, starts the worker, then the schedule. Closing undoes
 * it in reverse. Everything below it is built here and nowhere else.
 */
export class WorkerRuntime {
  private readonly reaper: TaskReaper;
  private readonly schedule: ReaperSchedule;
  private readonly worker: TaskWorker;
  private readonly layouts: QueueLayouts;
  private readonly declared: readonly DeclaredSchedule[];
  private readonly logger: TaskLogger;
  private subscriber: RedisConnection | undefined;
  private subscriberWatch: SubscriberWatch | undefined;
  private readonly book: ScheduleBook;
  /** The prefix's store with the layouts on record (schedules and the sweeps' turns use it). */
  private readonly tools: TaskStore;
  private readonly ticker: ScheduleTicker | undefined;
  /** Wake-ups of idle claim loops, heard on the one subscriber connection. */
  private readonly wakeSignals = new WakeSignals();

  constructor(
    private readonly redis: TaskRedis,
    private readonly options: ResolvedTransportOptions,
    patterns: PatternSettings,
    private readonly queues: readonly string[],
    hooks: RuntimeHooks,
    logger: TaskLogger,
  ) {
    // The worker's own store: its layouts check the configured shard count against the one on record.
    this.layouts = new QueueLayouts(redis, new PrefixKeys(options.prefix), options.shards, logger, options.group);
    const store = new TaskStore(redis, this.layouts);
    // Schedules fire into any pattern of the prefix, and a sweep in this process's turn covers every queue
    // of the prefix: their layouts are the ones on record (this worker's own were checked against them).
    const tools = TaskStore.recorded(redis, options.prefix);
    this.tools = tools;
    this.reaper = new TaskReaper(tools, reaperSettings(options), logger);
    // With reaperIntervalMs false the periodic sweep is left to a RedisTaskReaper elsewhere, but this
    // worker still promotes delayed tasks of its own queues at their due time.
    this.schedule = new ReaperSchedule(this.reaper, options.reaperIntervalMs, () => queues, logger);
    this.book = new ScheduleBook(tools, SCHEDULE_LIMITS, logger);
    // A node of a flow that settles here has its children released by this process at once.
    const flows = new FlowFolder(tools, logger);
    const checkMs = options.scheduleCheckMs;
    this.ticker =
      checkMs === false
        ? undefined
        : new ScheduleTicker(tools, { checkMs, limits: SCHEDULE_LIMITS, onTick: hooks.onScheduleTick }, logger);
    this.declared = hooks.schedules ?? [];
    this.logger = logger;
    this.worker = new TaskWorker(
      store,
      {
        // spread-ok: once per worker
        ...options,
        patterns,
        onDelayed: (_queue, dueAt) => this.schedule.wakeAt(dueAt),
        wakeSignals: this.wakeSignals,
        onStall: hooks.onStall,
        onOutcome: hooks.onOutcome,
        onFlowSettled: (keys) => flows.nudge(keys),
        onProgress: hooks.onProgress,
        wantsOutcomes: hooks.wantsOutcomes,
        tracing: hooks.tracing,
      },
      hooks.executor,
      logger,
    );
  }

  /**
   * Subscribes and registers at the same time (two connections: their round trips overlap), and
   * claims once both are done, so no resume or due time announced after the first claim is missed.
   */
  async start(): Promise<void> {
    const [subscribed, registered] = await Promise.allSettled([this.subscribe(), this.worker.register(this.queues)]);
    if (subscribed.status === 'rejected') throw subscribed.reason;
    if (registered.status === 'rejected') throw registered.reason;
    await this.storeSchedules();
    this.worker.startClaiming();
    this.schedule.start();
    this.ticker?.start();
  }

  /**
   * Stores the schedules this worker's code declares (replicas starting at once leave one of each), and
   * marks orphaned those a decorator stored for one of its patterns that its code no longer declares:
   * they stop firing, and listSchedules() says why (removeSchedule deletes one; the decorator back in
   * the code revives it).
   */
  private async storeSchedules(): Promise<void> {
    const stored = await this.book.list();
    for (const { id, spec } of this.declared) {
      if (stored.some((schedule) => schedule.id === id && schedule.source === 'api')) {
        this.logger.warn(
          `schedule "${id}", stored by upsertSchedule, is now the one its @TaskSchedule declares; give one of them another id`,
        );
      }
      await this.book.upsert(id, spec, 'code');
    }
    const declared = new Set(this.declared.map(({ id }) => id));
    const patterns = new Set(this.queues);
    for (const schedule of stored) {
      const gone = schedule.source === 'code' && patterns.has(schedule.spec.pattern) && !declared.has(schedule.id);
      if (gone && !schedule.orphaned && (await this.book.orphan(schedule.id))) {
        this.logger.warn(
          `schedule "${schedule.id}" of "${schedule.spec.pattern}" is no longer declared by a @TaskSchedule of this worker: it fires no more; removeSchedule("${schedule.id}") deletes it`,
        );
      }
    }
  }

  /** One reaper sweep over this worker's patterns now. */
  sweep(): Promise<SweepResult> {
    return this.reaper.sweep(this.queues);
  }

  async close(): Promise<void> {
    await settledBy(this.ticker?.close() ?? Promise.resolve(), Date.now() + SCHEDULE_STOP_MS);
    // A sweep under way waits for Redis: during an outage, close does not wait for it to end.
    await settledBy(this.schedule.stop(), Date.now() + SCHEDULE_STOP_MS);
    this.subscriberWatch?.stop();
    const subscriber = this.subscriber;
    this.subscriber = undefined;
    if (subscriber) await quit(subscriber);
    await this.worker.close();
  }

  /**
   * Due times of delayed tasks (promoted on time), resumes of paused queues (claimed at once), and the
   * wake-ups of idle queue shards: one connection for all of them, whatever the number of patterns.
   */
  private async subscribe(): Promise<void> {
    if (this.queues.length === 0) return;
    // Opened first: its handshake goes on while the layouts are checked.
    const subscriber = openBlockingConnection(this.redis, `tasks:worker:${this.options.workerId}:due`);
    this.subscriber = subscriber;
    subscriber.on('error', () => undefined); // outages are reported once by the command connection
    // Checks each queue's shard count against the one on record before anything else uses it.
    const shards = (await this.layouts.layouts(this.queues)).flatMap((layout) => layout.shards);
    const control = new Set(shards.map((keys) => keys.controlChannel));
    const wakes = new Set(shards.map((keys) => keys.wakeChannel));
    const schedulesChanged = this.ticker && this.tools.keys.schedules.changed;
    subscriber.on('message', (channel: string, message: string) => {
      if (wakes.has(channel)) this.wakeSignals.heard(channel);
      else if (control.has(channel)) this.worker.control(channel, message);
      else if (channel === schedulesChanged) this.ticker?.wake();
      else this.schedule.wakeAt(Number(message));
    });
    // Back after a reconnection (ioredis subscribed again first): what was published meanwhile was not
    // heard, so every idle loop claims once, and the schedule ticker checks once.
    subscriber.on('ready', () => {
      this.wakeSignals.wakeAll();
      this.ticker?.wake();
    });
    // A lone loop waits on its bell: no message per push for it (its wake channel is subscribed to if its bell breaks).
    const heard = waitsOnItsBell(shards.length) ? [] : [...wakes];
    if (heard.length < wakes.size)
      this.wakeSignals.leaveUnheard([...wakes], (channel) => subscriber.subscribe(channel));
    const channels = shards.flatMap((keys) => [keys.dueChannel, keys.controlChannel]);
    await subscriber.subscribe(...channels, ...heard, ...(schedulesChanged ? [schedulesChanged] : []));
    // A half-open subscriber raises nothing: PINGed, and cut when it stops answering (see SubscriberWatch).
    this.subscriberWatch = new SubscriberWatch(
      subscriberSocket(subscriber),
      this.options.watchdogTimeoutMs,
      this.logger,
      this.options.workerId,
      () => this.wakeSignals.wakeAll(),
    );
    this.subscriberWatch.start();
  }
}
