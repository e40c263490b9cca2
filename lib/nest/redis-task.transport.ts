import { EventEmitter } from 'node:events';
import { Logger } from '@nestjs/common';
import { Server, type MessageHandler } from '@nestjs/microservices';
import { lastValueFrom } from 'rxjs';
import {
  closeConnection,
  describeServer,
  NotReadyError,
  openBlockingConnection,
  openConnection,
  quit,
  watchOf,
  type OwnedConnection,
} from '../core/redis/connection.js';
import { ClosedError, InvalidOptionError, NonRetryableTaskError, RedisConfigurationError, RedisPermissionError, RedisUnavailableError } from '../core/model/errors.js';
import { scrubRedisError } from '../core/support/redact.js';
import { printableLogger } from '../core/support/logger.js';
import { checkServer, isPermissionError } from '../core/redis/guardrails.js';
import { PrefixKeys } from '../core/redis/keys.js';
import { reaperSettings, resolveTransportOptions, type RedisTaskTransportOptions, type ResolvedTransportOptions } from '../core/config/options.js';
import { TaskReaper, type SweepResult } from '../core/reaper/reaper.js';
import { ReaperSchedule } from '../core/reaper/schedule.js';
import { ShardCounts } from '../core/redis/layouts.js';
import { mergeRetry, type RetryPolicy } from '../core/model/retry-policy.js';
import { validateClientConcurrency, validateRate, validateRetry } from '../core/config/rules.js';
import type { RedisConnection, TaskRedis } from '../core/redis/scripts.js';
import { TaskWorker, type TaskExecution, type TaskOutcome } from '../core/worker/worker.js';
import { watchConnection } from './connection-events.js';
import { REDIS_TASK_TRANSPORT } from './constants.js';
import { capturedError, installErrorCapture } from './error-capture.js';
import { RedisTaskContext } from './redis-task.context.js';
import { RedisTaskStatus, type RedisTaskEvents } from './redis-task.events.js';

/**
 * A Nest microservice transport that consumes tasks from Redis: each `@EventPattern` /
 * `@MessagePattern` is a queue; tasks are claimed atomically, acknowledged when the handler
 * succeeds, and never lost when a worker stops.
 *
 * ```ts
 * NestFactory.createMicroservice(WorkerModule, { strategy: new RedisTaskTransport({ concurrency: 16 }) });
 * ```
 */
export class RedisTaskTransport extends Server<RedisTaskEvents, RedisTaskStatus> {
  override readonly transportId = REDIS_TASK_TRANSPORT;
  readonly options: ResolvedTransportOptions;
  private readonly log = new Logger(RedisTaskTransport.name);
  private readonly events = new EventEmitter();
  private connection: OwnedConnection | undefined;
  private worker: TaskWorker | undefined;
  private reaper: TaskReaper | undefined;
  private schedule: ReaperSchedule | undefined;
  /** Hears producers announce a delayed task that became a queue's earliest (to promote it on time). */
  private dueSubscriber: RedisConnection | undefined;
  private policies = new Map<string, RetryPolicy>();
  private readonly handlers = new Map<string, MessageHandler | null>();
  private clientCaps = new Map<string, number>();
  private lastStatus = RedisTaskStatus.DISCONNECTED;

  constructor(options?: RedisTaskTransportOptions) {
    super();
    this.options = resolveTransportOptions(options);
    installErrorCapture();
  }

  async listen(callback: (error?: unknown) => void): Promise<void> {
    try {
      // Validate handler extras before touching Redis: a bad option fails start-up with nothing opened.
      this.policies = this.retryPolicies();
      this.clientCaps = this.patternClientCaps();
      const rateLimits = this.patternRateLimits();
      const handlerTimeouts = this.patternHandlerTimeouts();
      const queues = [...this.messageHandlers.keys()];
      this.connection = openConnection(this.options.connection, `tasks:worker:${this.options.workerId}`);
      const { redis } = this.connection;
      watchConnection(redis, this.events, (status) => this.publishStatus(status), this.log);
      await this.untilRedisAnswers(redis);
      await checkServer(redis, this.options.evictionPolicy, this.log);
      const keys = new PrefixKeys(this.options.prefix);
      const layouts = new ShardCounts(redis, keys, this.options.shards, this.log, this.options.group);
      const base: RetryPolicy = { maxAttempts: this.options.maxAttempts, backoff: this.options.backoff };
      this.reaper = new TaskReaper(
        redis,
        keys,
        layouts,
        reaperSettings(this.options),
        printableLogger(this.log),
      );
      // With reaperIntervalMs false the periodic sweep is left to a RedisTaskReaper elsewhere, but this
      // worker still promotes delayed tasks of its own queues at their due time.
      this.schedule = new ReaperSchedule(this.reaper, this.options.reaperIntervalMs, () => queues, this.log);
      await this.listenForDueTimes(redis, layouts, queues);
      this.worker = new TaskWorker(
        redis,
        keys,
        layouts,
        {
          ...this.options,
          retryPolicy: (queue) => this.policies.get(queue) ?? base,
          clientCap: (queue) => this.clientCaps.get(queue) ?? this.options.clientConcurrency,
          rateLimit: (queue) => rateLimits.get(queue) ?? this.options.clientRateLimit,
          handlerTimeout: (queue) => handlerTimeouts.get(queue) ?? this.options.handlerTimeoutMs,
          onDelayed: (_queue, dueAt) => this.schedule?.wakeAt(dueAt),
          onStall: (stalled) => this.publishStatus(stalled ? RedisTaskStatus.STALLED : RedisTaskStatus.CONNECTED),
          onOutcome: (event) => this.events.emit('task', event),
        },
        (execution) => this.execute(execution),
        printableLogger(this.log),
      );
      await this.worker.start(queues);
      this.schedule?.start();
      this.log.log(
        `worker ${this.options.workerId} consuming ${queues.length} pattern(s) with concurrency ${this.options.concurrency}`,
      );
      callback();
    } catch (error) {
      // Whatever was opened before the failure is closed, so a failed start leaves no handle behind.
      await this.close().catch(() => undefined);
      callback(isPermissionError(error) ? new RedisPermissionError(this.options.prefix, (error as Error).message) : scrubRedisError(error));
    }
  }

  /**
   * A worker started before Redis (docker-compose, Kubernetes) waits for it, status `reconnecting`
   * meanwhile, logging once when it starts waiting and once when Redis answers; `startupTimeoutMs`
   * bounds the wait. A cause no retry heals (refused credentials, an untrusted certificate) fails at once.
   */
  private async untilRedisAnswers(redis: TaskRedis): Promise<void> {
    const watch = watchOf(redis, describeServer(this.options.connection));
    const started = Date.now();
    const limit = this.options.startupTimeoutMs;
    let waiting = false;
    for (;;) {
      if (this.connection?.redis !== redis) throw new ClosedError('RedisTaskTransport');
      try {
        await watch.whenReady(limit > 0 ? Math.max(1, Math.min(1_000, started + limit - Date.now())) : 1_000);
        await redis.ping();
        if (waiting) this.log.log(`Redis at ${watch.server} answered after ${Date.now() - started} ms; starting`);
        return;
      } catch (error) {
        // Redis's own replies and misconfiguration end the wait; an unreachable server does not.
        if (!(error instanceof NotReadyError) && (error as Error).name === 'ReplyError') throw error;
        if (error instanceof RedisConfigurationError) throw error;
        if (!waiting) {
          waiting = true;
          this.publishStatus(RedisTaskStatus.RECONNECTING);
          this.log.warn(`waiting for Redis at ${watch.server} (${watch.lastError ?? 'not reachable yet'}); the worker starts once it answers`);
        }
        if (limit > 0 && Date.now() - started >= limit) {
          throw new RedisUnavailableError('', watch.server, limit, false, `the worker gave up starting (startupTimeoutMs); last: ${watch.lastError ?? 'no answer'}`);
        }
      }
    }
  }

  /** Stops claiming, lets running handlers finish (up to `shutdownTimeoutMs`), requeues the rest. */
  async close(): Promise<void> {
    const worker = this.worker;
    const connection = this.connection;
    const schedule = this.schedule;
    const dueSubscriber = this.dueSubscriber;
    this.dueSubscriber = undefined;
    this.worker = undefined;
    this.connection = undefined;
    this.schedule = undefined;
    this.reaper = undefined;
    await schedule?.stop();
    if (dueSubscriber) {
      await quit(dueSubscriber);
    }
    await worker?.close();
    await closeConnection(connection);
    this.publishStatus(RedisTaskStatus.DISCONNECTED);
  }

  /**
   * Runs one reaper sweep over this worker's patterns now: recovers dead workers' tasks and promotes
   * due retries. The transport also runs it every `reaperIntervalMs`.
   */
  async sweep(): Promise<SweepResult> {
    if (!this.reaper) {
      throw new Error('RedisTaskTransport is not listening: sweep() runs after the microservice has started');
    }
    return this.reaper.sweep([...this.messageHandlers.keys()]);
  }

  on<EventKey extends keyof RedisTaskEvents>(event: EventKey, callback: RedisTaskEvents[EventKey]): void {
    this.events.on(event, callback as (...args: unknown[]) => void);
  }

  unwrap<T = TaskRedis>(): T {
    if (!this.connection) {
      throw new Error('RedisTaskTransport is not listening: call unwrap() after the microservice has started');
    }
    return this.connection.redis as T;
  }

  private async listenForDueTimes(redis: TaskRedis, layouts: ShardCounts, queues: readonly string[]): Promise<void> {
    if (queues.length === 0) {
      return;
    }
    // Checks each queue's shard count against the one on record before anything else uses it.
    const shards = (await layouts.layouts(queues)).flatMap((layout) => layout.shards);
    const subscriber = openBlockingConnection(redis, `tasks:worker:${this.options.workerId}:due`);
    this.dueSubscriber = subscriber;
    subscriber.on('error', () => undefined); // outages are reported once by the command connection
    const control = new Set(shards.map((keys) => keys.controlChannel));
    subscriber.on('message', (channel: string, message: string) => {
      if (control.has(channel)) {
        this.worker?.resume(channel);
      } else {
        this.schedule?.wakeAt(Number(message));
      }
    });
    // Due times of delayed tasks, and resumes of paused queues.
    await subscriber.subscribe(...shards.flatMap((keys) => [keys.dueChannel, keys.controlChannel]));
  }

  /** Per-pattern `clientRateLimit` from handler extras: `@EventPattern('p', { clientRateLimit: 50 })`. */
  private patternRateLimits(): Map<string, number> {
    const rates = new Map<string, number>();
    for (const [pattern, handler] of this.messageHandlers) {
      const rate = (handler.extras as Record<string, unknown> | undefined)?.clientRateLimit;
      if (rate !== undefined) {
        validateRate(`extras of pattern "${pattern}".clientRateLimit`, rate);
        rates.set(pattern, rate as number);
      }
    }
    return rates;
  }

  /** Per-pattern `handlerTimeoutMs` from handler extras: `@EventPattern('p', { handlerTimeoutMs: 30_000 })`. */
  private patternHandlerTimeouts(): Map<string, number> {
    const timeouts = new Map<string, number>();
    for (const [pattern, handler] of this.messageHandlers) {
      const timeout = (handler.extras as Record<string, unknown> | undefined)?.handlerTimeoutMs;
      if (timeout === undefined) continue;
      if (typeof timeout !== 'number' || !Number.isInteger(timeout) || timeout < 0 || timeout > 86_400_000) {
        throw new InvalidOptionError(`extras of pattern "${pattern}".handlerTimeoutMs`, `must be an integer from 0 to 86400000, got ${String(timeout)}`);
      }
      timeouts.set(pattern, timeout);
    }
    return timeouts;
  }

  /** Per-pattern `clientConcurrency` from handler extras: `@EventPattern('p', { clientConcurrency: 1 })`. */
  private patternClientCaps(): Map<string, number> {
    const caps = new Map<string, number>();
    for (const [pattern, handler] of this.messageHandlers) {
      const cap = (handler.extras as Record<string, unknown> | undefined)?.clientConcurrency;
      if (cap === undefined) {
        continue;
      }
      validateClientConcurrency(`extras of pattern "${pattern}".clientConcurrency`, cap);
      caps.set(pattern, cap as number);
    }
    return caps;
  }

  private retryPolicies(): Map<string, RetryPolicy> {
    const base: RetryPolicy = { maxAttempts: this.options.maxAttempts, backoff: this.options.backoff };
    const policies = new Map<string, RetryPolicy>();
    for (const [pattern, handler] of this.messageHandlers) {
      const extras = (handler.extras ?? {}) as Record<string, unknown>;
      if (extras.maxAttempts === undefined && extras.backoff === undefined) {
        continue;
      }
      const retry = validateRetry(
        `extras of pattern "${pattern}"`,
        { maxAttempts: extras.maxAttempts, backoff: extras.backoff },
        (where, message) => new InvalidOptionError(where, message),
      );
      policies.set(pattern, mergeRetry(base, retry));
    }
    return policies;
  }

  /** The last status reported: `connected` while listening and Redis answers the worker. */
  get currentStatus(): RedisTaskStatus {
    return this.lastStatus;
  }

  /** True while listening with a worker that claims (not stalled, not cut off from Redis). */
  get consuming(): boolean {
    return this.worker !== undefined && this.lastStatus === RedisTaskStatus.CONNECTED;
  }

  private publishStatus(status: RedisTaskStatus): void {
    this.lastStatus = status;
    this._status$.next(status);
    this.events.emit('status', status);
  }

  private async execute(execution: TaskExecution): Promise<TaskOutcome> {
    // Nest's lookup parses the pattern on every call; the handlers are fixed once listening.
    let handler = this.handlers.get(execution.queue);
    if (handler === undefined) {
      handler = this.getHandlerByPattern(execution.queue);
      this.handlers.set(execution.queue, handler);
    }
    if (!handler) {
      return { status: 'failed', error: new Error(`no handler for "${execution.queue}"`) };
    }
    if (execution.expectsReply && handler.isEventHandler) {
      // An @EventPattern returns nothing to a caller: resolving send() with null would hide the mistake.
      return {
        status: 'failed',
        error: new NonRetryableTaskError(`"${execution.queue}" is handled by an @EventPattern, which returns no result: use emit(), or make the handler a @MessagePattern`),
      };
    }
    const context = new RedisTaskContext([
      {
        id: execution.id,
        pattern: execution.queue,
        clientId: execution.clientId,
        attempt: execution.attempt,
        maxAttempts: execution.maxAttempts,
        enqueuedAt: new Date(execution.enqueuedAt),
        workerId: execution.workerId,
        group: execution.group,
        get signal() {
          return execution.signal; // made on first use
        },
      },
    ]);
    try {
      // The head handler runs any further @EventPattern handlers of the pattern and joins them.
      const result = await handler(execution.payload, context);
      const response = await lastValueFrom(this.transformToObservable(result), { defaultValue: undefined });
      return { status: 'succeeded', response: handler.isEventHandler ? undefined : response };
    } catch (error) {
      return { status: 'failed', error: capturedError(context) ?? error, replyError: error };
    }
  }
}
