import { EventEmitter } from 'node:events';
import { Logger } from '@nestjs/common';
import { Server, type MessageHandler } from '@nestjs/microservices';
import { isObservable, lastValueFrom } from 'rxjs';
import { NonRetryableTaskError } from '../core/model/errors.js';
import { printableLogger } from '../core/support/logger.js';
import {
  describeConnection,
  resolveTransportOptions,
  type RedisConnection,
  type RedisTaskTransportOptions,
  type ResolvedTransportOptions,
} from '../core/config/options.js';
import type { SweepResult } from '../core/reaper/reaper.js';
import { WorkerRuntime } from '../core/worker/runtime.js';
import { WorkerConnection } from '../core/worker/worker-connection.js';
import { loadTracing } from '../core/support/tracing.js';
import type { TaskExecution, TaskOutcome } from '../core/worker/worker-types.js';
import type { FlowNodeInfo } from '../core/model/flow.js';
import { patternSettings } from '../core/config/pattern-settings.js';
import { watchConnection } from './connection-events.js';
import { REDIS_TASK_TRANSPORT } from './constants.js';
import { capturedError, installErrorCapture } from './error-capture.js';
import { transportMade } from './transport-presence.js';
import { RedisTaskContext, type RedisTaskInfo } from './redis-task.context.js';
import { RedisTaskStatus, type RedisTaskEvents } from './redis-task.events.js';
import { declaredSchedules } from './task-schedule.decorator.js';

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
  private connection: WorkerConnection | undefined;
  private runtime: WorkerRuntime | undefined;
  // table-ok: one entry per pattern
  private readonly handlers = new Map<string, MessageHandler | null>();
  private lastStatus = RedisTaskStatus.DISCONNECTED;

  constructor(options?: RedisTaskTransportOptions) {
    super();
    this.options = resolveTransportOptions(options);
    installErrorCapture();
    transportMade();
  }

  async listen(callback: (error?: unknown) => void): Promise<void> {
    try {
      // Handler extras are checked before touching Redis: a bad one fails start-up with nothing opened.
      const patterns = patternSettings(
        new Map([...this.messageHandlers].map(([pattern, handler]) => [pattern, handler.extras])),
        this.options,
      );
      const queues = [...this.messageHandlers.keys()];
      const schedules = declaredSchedules(this.messageHandlers);
      const connection = new WorkerConnection(this.options, (redis) =>
        watchConnection(redis, this.events, (status) => this.publishStatus(status), this.log),
      );
      this.connection = connection;
      await connection.ready(this.log, () => this.publishStatus(RedisTaskStatus.RECONNECTING));
      const tracing = await loadTracing(this.options.tracing);
      this.runtime = new WorkerRuntime(
        connection.redis,
        this.options,
        patterns,
        queues,
        {
          tracing,
          executor: (execution) => this.execute(execution),
          onStall: (stalled) => this.publishStatus(stalled ? RedisTaskStatus.STALLED : RedisTaskStatus.CONNECTED),
          onOutcome: (event) => this.events.emit('task', event),
          onProgress: (event) => this.events.emit('progress', event),
          wantsOutcomes: () => this.events.listenerCount('task') > 0,
          schedules,
          onScheduleTick: (event) => this.events.emit('schedule', event),
        },
        printableLogger(this.log),
      );
      await this.runtime.start();
      this.log.log(startLine(this.options, queues));
      callback();
    } catch (error) {
      // Whatever was opened before the failure is closed, so a failed start leaves no handle behind.
      const failure = this.connection?.startupError(error) ?? error;
      await this.close().catch(() => undefined);
      callback(failure);
    }
  }

  /** Stops claiming, lets running handlers finish (up to `shutdownTimeoutMs`), requeues the rest. */
  async close(): Promise<void> {
    const runtime = this.runtime;
    const connection = this.connection;
    this.runtime = undefined;
    this.connection = undefined;
    await runtime?.close();
    await connection?.close();
    this.publishStatus(RedisTaskStatus.DISCONNECTED);
  }

  /**
   * Runs one reaper sweep over this worker's patterns now: recovers dead workers' tasks and promotes
   * due retries. The transport also runs it every `reaperIntervalMs`.
   */
  async sweep(): Promise<SweepResult> {
    if (!this.runtime) {
      throw new Error('RedisTaskTransport is not listening: sweep() runs after the microservice has started');
    }
    return this.runtime.sweep();
  }

  on<EventKey extends keyof RedisTaskEvents>(event: EventKey, callback: RedisTaskEvents[EventKey]): void {
    this.events.on(event, callback as (...args: unknown[]) => void);
  }

  unwrap<T = RedisConnection>(): T {
    if (!this.connection) {
      throw new Error('RedisTaskTransport is not listening: call unwrap() after the microservice has started');
    }
    return this.connection.redis as unknown as T;
  }

  /** The last status reported: `connected` while listening and Redis answers the worker. */
  get currentStatus(): RedisTaskStatus {
    return this.lastStatus;
  }

  /** True while listening with a worker that claims (not stalled, not cut off from Redis). */
  get consuming(): boolean {
    return this.runtime !== undefined && this.lastStatus === RedisTaskStatus.CONNECTED;
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
        error: new NonRetryableTaskError(
          `"${execution.queue}" is handled by an @EventPattern, which returns no result: use emit(), or make the handler a @MessagePattern`,
        ),
      };
    }
    const context = new RedisTaskContext([new TaskInfo(execution), execution.control]);
    try {
      // The head handler runs any further @EventPattern handlers of the pattern and joins them.
      const result: unknown = await handler(execution.payload, context);
      // What Nest's transformToObservable + lastValueFrom give, without an Observable per plain result
      // (the promise is awaited already, so the result is an Observable or the value itself).
      const response = isObservable(result) ? await lastValueFrom(result, { defaultValue: undefined }) : result;
      // A node of a flow hands its result to its children, whichever kind of handler it has.
      return {
        status: 'succeeded',
        response: handler.isEventHandler && execution.flow === undefined ? undefined : response,
      };
    } catch (error) {
      // The handler's own error, as Nest's base filter saw it (it would mask it as "Internal server
      // error"); where a user's filter handled it instead, what that filter emitted.
      const seen = capturedError(context);
      return { status: 'failed', error: seen ? seen.thrown : error };
    }
  }
}

/** What a worker says once it consumes: which patterns, for which group, from where, how many at once. */
function startLine(options: ResolvedTransportOptions, queues: readonly string[]): string {
  const named =
    queues
      .slice(0, 10)
      .map((queue) => JSON.stringify(queue))
      .join(', ') + (queues.length > 10 ? ` and ${queues.length - 10} more` : '');
  const what =
    queues.length === 0
      ? 'no pattern (this app has no @EventPattern or @MessagePattern handler)'
      : `${queues.length === 1 ? 'pattern' : `${queues.length} patterns`} ${named}`;
  return (
    `worker ${options.workerId} consuming ${what} for group "${options.group}", concurrency ${options.concurrency}, ` +
    `from Redis at ${describeConnection(options.connection)} (prefix "${options.prefix}")`
  );
}

/**
 * `ctx.getTask()`: a class, not an object literal with a `signal` getter, whose closure per run would give
 * every literal a hidden class of its own that keeps the run alive through scavenges (see RunExecution).
 */
class TaskInfo implements RedisTaskInfo {
  readonly id: string;
  readonly pattern: string;
  readonly clientId: string;
  readonly attempt: number;
  readonly maxAttempts: number;
  readonly enqueuedAt: Date;
  readonly workerId: string;
  readonly group: string;
  readonly flow?: FlowNodeInfo;

  constructor(private readonly execution: TaskExecution) {
    this.id = execution.id;
    this.pattern = execution.queue;
    this.clientId = execution.clientId;
    this.attempt = execution.attempt;
    this.maxAttempts = execution.maxAttempts;
    this.enqueuedAt = new Date(execution.enqueuedAt);
    this.workerId = execution.workerId;
    this.group = execution.group;
    if (execution.flow) this.flow = execution.flow;
  }

  /** Made on first use: most handlers never look at it. */
  get signal(): AbortSignal {
    return this.execution.signal;
  }
}
