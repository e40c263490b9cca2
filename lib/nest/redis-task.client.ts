import { EventEmitter } from 'node:events';
import { Logger, type OnApplicationShutdown } from '@nestjs/common';
import { ClientProxy, type ReadPacket, type WritePacket } from '@nestjs/microservices';
import { Observable, throwError, type Subscriber } from 'rxjs';
import { ClosedError, InvalidTaskError } from '../core/model/errors.js';
import {
  resolveClientOptions,
  type RedisConnection,
  type RedisTaskClientOptions,
  type ResolvedClientOptions,
} from '../core/config/options.js';
import { TaskProducer, type EnqueueItem, type EnqueueReceipt } from '../core/producer/producer.js';
import { ProducerRuntime } from '../core/producer/producer-runtime.js';
import { watchConnection } from './connection-events.js';
import { EmitOutcome } from './emit-outcome.js';
import { RedisTaskRecord, taskItem } from './redis-task-record.builder.js';
import type { CancelResult } from '../core/model/task-status.js';
import { RedisTaskStatus, type RedisTaskEvents } from './redis-task.events.js';
import { openBatch, type RedisTaskBatch } from './redis-task-batch.js';
import { cancelWithin } from './client-cancel.js';
import { resolveBatchOptions } from '../core/batches/task-batch.js';
import type { BatchOptions } from '../core/model/batch.js';
import type { FlowOptions, FlowReceipt } from '../core/model/flow.js';
import { flowWithin } from './client-flow.js';
import { callsWithin } from '../core/producer/call-within.js';
import type { OutboxReceipt } from '../core/outbox/outbox-rows.js';
import { notInTransaction, outboxEmit, outboxTarget, writeOutbox } from './client-outbox.js';
import { publishSend } from './client-send.js';
import { emitWhenConnected, sendWhenConnected } from './client-connecting.js';
import type { OutboxWriter } from '../core/outbox/outbox-store.js';
import type { RelayTarget } from '../core/outbox/outbox-relay.js';

/**
 * The producer side: `emit` enqueues a task and completes (with a receipt: the task id, and whether it
 * was refused as a duplicate of a live task with the same deduplication key) once Redis accepted it;
 * `send` enqueues and emits the `@MessagePattern` handler's result; `emitBatch` enqueues many tasks
 * in one round trip. Pass a `RedisTaskRecord` (see `RedisTaskRecordBuilder`) to set per-task options.
 */
export class RedisTaskClient extends ClientProxy implements OnApplicationShutdown {
  readonly options: ResolvedClientOptions;
  private readonly log = new Logger(RedisTaskClient.name);
  private readonly events = new EventEmitter();
  /** Reply channel of this client instance. */
  private readonly replyChannel: string;
  /** The connection, producer and reply inbox, while open (see ProducerRuntime). */
  private runtime: ProducerRuntime | undefined;
  /** The producer of the open runtime: the emit fast path reads this one field. */
  private producer: TaskProducer | undefined;
  /** Set once connect() resolved (and cleared by close()): emits then skip it. */
  private connected = false;
  private connecting: Promise<RedisConnection> | undefined;
  /** The transactional outbox (RedisTaskOutboxModule), when the app uses one. */
  private outbox: OutboxWriter | undefined;
  /** Calls of several commands (flow(), a batch's add and seal) within `enqueueTimeoutMs`, connecting included. */
  private readonly within = callsWithin(
    () => this.options,
    () => this.connect(),
  );

  constructor(options?: RedisTaskClientOptions) {
    super();
    this.options = resolveClientOptions(options);
    this.replyChannel = ProducerRuntime.replyChannel(this.options);
  }

  /** Opens the connection once; later calls share the same promise (Nest calls it on every emit). */
  connect(): Promise<RedisConnection> {
    this.connecting ??= this.open().then(
      (redis) => {
        this.connected = true;
        return redis;
      },
      (error: unknown) => {
        this.connecting = undefined;
        throw error;
      },
    );
    return this.connecting;
  }

  /**
   * Enqueues many tasks (payloads or `RedisTaskRecord`s) for one pattern: one round trip per `batchChunkSize` items,
   * each chunk all or nothing; one invalid item rejects the whole batch (its index named). Receipts in order.
   */
  async emitBatch<TInput = unknown>(
    pattern: unknown,
    items: readonly (TInput | RedisTaskRecord<TInput>)[],
    options?: { readonly batch?: BatchOptions },
  ): Promise<EnqueueReceipt[]> {
    if (!Array.isArray(items)) {
      throw new InvalidTaskError(`emitBatch() needs an array of items, got ${typeof items}`);
    }
    if (this.outbox?.inTransaction()) {
      if (options?.batch !== undefined) throw notInTransaction('a batch');
      return this.toOutbox(this.outbox, pattern, items);
    }
    if (options?.batch !== undefined) return this.batch(options.batch).addAndSeal(pattern, items);
    // Connected: handed over in this turn, so calls made in one turn are written in call order. Not
    // connected: connecting counts against the call's one deadline (enqueueTimeoutMs from now).
    const deadline = this.connected ? undefined : Date.now() + this.options.enqueueTimeoutMs;
    if (!this.connected) await this.connect();
    const now = Date.now();
    return this.requireProducer().enqueue(
      this.normalizePattern(pattern as string),
      items.map((item) => this.toItem(item, now)),
      deadline,
    );
  }

  /**
   * Opens a batch (fan-out, then fan-in; see `RedisTaskBatch`): once sealed and every task added settled,
   * `onComplete` is enqueued exactly once with a summary (`BatchSummary`), `onSuccess` when all succeeded.
   */
  batch(options: BatchOptions): RedisTaskBatch {
    if (this.outbox?.inTransaction()) throw notInTransaction('a batch');
    return openBatch(this.within, resolveBatchOptions(options, this.options.clientId), async () => ({
      runtime: await this.readyRuntime(),
      item: (data) => this.toItem(data),
      pattern: (p) => this.normalizePattern(p),
    }));
  }

  /** Creates a flow: tasks that depend on tasks (README "Flows"); a call again with its id creates nothing. */
  async flow(options: FlowOptions): Promise<FlowReceipt> {
    if (this.outbox?.inTransaction()) throw notInTransaction('a flow');
    return flowWithin(this.within, this.options, options, () => this.readyRuntime());
  }

  /**
   * Enqueues a task; the Observable emits its receipt (task id, duplicate or not) once Redis wrote it.
   * Like Nest's own `emit`, the task is sent whether or not anything subscribes; unlike it, a late
   * subscriber still gets the receipt (or the error).
   */
  override emit<TResult = EnqueueReceipt, TInput = unknown>(pattern: unknown, data: TInput): Observable<TResult> {
    if (pattern === null || pattern === undefined || data === null || data === undefined || this.dispatchHooked) {
      return super.emit<TResult, TInput>(pattern, data); // Nest's InvalidMessageException; a dispatch hook sees the packet
    }
    if (this.outbox?.inTransaction()) {
      return outboxEmit(this.toOutbox(this.outbox, pattern, [data]).then(([receipt]) => receipt as TResult));
    }
    const producer = this.producer;
    // Reported to subscribers (nobody subscribing is no unhandled rejection: there is no promise).
    const outcome = new EmitOutcome<TResult>();
    if (producer && this.connected) {
      // Connected: straight to the producer (no promise for connect(), no Subject per emit).
      producer.enqueueOneTo(this.normalizePattern(pattern as string), this.toItem(data), outcome);
    } else {
      const queue = this.normalizePattern(pattern as string);
      const timeoutMs = this.options.enqueueTimeoutMs;
      emitWhenConnected(
        () => this.connect(),
        () => this.requireProducer(),
        queue,
        () => this.toItem(data),
        outcome,
        timeoutMs,
      );
    }
    return new Observable<TResult>((subscriber) => outcome.subscribe(subscriber));
  }

  /**
   * Enqueues a task for a `@MessagePattern` handler; the Observable emits the handler's result. As
   * with Nest's own `send`, nothing is sent until it is subscribed to.
   */
  override send<TResult = unknown, TInput = unknown>(pattern: unknown, data: TInput): Observable<TResult> {
    if (pattern === null || pattern === undefined || data === null || data === undefined || this.dispatchHooked) {
      return super.send<TResult, TInput>(pattern, data);
    }
    if (this.outbox?.inTransaction()) return throwError(() => notInTransaction('send()'));
    if (!this.connected) {
      const publish = (observer: Subscriber<TResult>, deadline: number) =>
        this.publish({ pattern, data }, this.createObserver(observer), deadline);
      return sendWhenConnected(() => this.connect(), publish, this.options.enqueueTimeoutMs);
    }
    // Connected: no promise for connect() and no mergeMap per call.
    return new Observable<TResult>((observer) => this.publish({ pattern, data }, this.createObserver(observer)));
  }

  /** Cancels a tracked task (see `RedisTaskAdmin.cancel`) within `enqueueTimeoutMs`; its `send()` caller gets `TaskCancelledError`. */
  cancel(pattern: string, id: string, reason?: string): Promise<CancelResult> {
    return cancelWithin(this.options, () => this.connect(), this.normalizePattern(pattern), id, reason);
  }

  /** Sends emits made inside a database transaction to `outbox` (RedisTaskOutboxModule calls it); undefined: off. */
  useOutbox(outbox: OutboxWriter | undefined): void {
    this.outbox = outbox;
  }

  /** Where the outbox relay hands rows over: this client's producer (connected on first use). */
  outboxTarget(): RelayTarget {
    return outboxTarget(
      async () => (await this.readyRuntime()).producer,
      () => this.producer,
    );
  }

  /** Nest 12's `setOnDispatchHook` (instrumentation) sees every packet: then Nest's own path is kept. */
  private get dispatchHooked(): boolean {
    return (this as unknown as { onDispatchHook?: unknown }).onDispatchHook !== undefined;
  }

  async close(): Promise<void> {
    const runtime = this.runtime;
    this.runtime = undefined;
    this.producer = undefined;
    this.connecting = undefined;
    this.connected = false;
    await runtime?.close();
    this._status$.next(RedisTaskStatus.DISCONNECTED);
  }

  onApplicationShutdown(): Promise<void> {
    return this.close();
  }

  override on<EventKey extends keyof RedisTaskEvents>(event: EventKey, callback: RedisTaskEvents[EventKey]): void {
    this.events.on(event, callback as (...args: unknown[]) => void);
  }

  unwrap<T = RedisConnection>(): T {
    if (!this.runtime) throw new Error('RedisTaskClient is not connected: call connect() (or emit) first');
    return this.runtime.redis as unknown as T;
  }

  protected async dispatchEvent<T = EnqueueReceipt>(packet: ReadPacket): Promise<T> {
    const queue = this.normalizePattern(packet.pattern);
    return (await this.requireProducer().enqueueOne(queue, this.toItem(packet.data))) as T;
  }

  protected publish(
    packet: ReadPacket,
    callback: (packet: WritePacket) => void,
    deadline = Date.now() + this.options.enqueueTimeoutMs,
  ): () => void {
    const queue = this.normalizePattern(packet.pattern);
    return publishSend(this.runtime, queue, packet.data, this.options.clientId, callback, deadline);
  }

  private async open(): Promise<RedisConnection> {
    const runtime = await ProducerRuntime.create(this.options, this.replyChannel, this.log, (redis) =>
      watchConnection(redis, this.events, (status) => this.publishStatus(status), this.log),
    );
    this.runtime = runtime;
    this.producer = runtime.producer;
    try {
      await runtime.ready();
    } catch (error) {
      // Misconfigured, or a refused start-up check: nothing to wait for, and nothing left open behind it.
      if (this.runtime === runtime) {
        this.runtime = undefined;
        this.producer = undefined;
      }
      await runtime.close();
      throw error;
    }
    return runtime.redis;
  }

  /** The runtime once connected (ClosedError when the client closed). */
  private async readyRuntime(): Promise<ProducerRuntime> {
    if (!this.connected) await this.connect();
    if (!this.runtime) throw new ClosedError('RedisTaskClient');
    return this.runtime;
  }

  private requireProducer(): TaskProducer {
    if (!this.producer) throw new ClosedError('RedisTaskClient');
    return this.producer;
  }

  /** The tasks' rows written in the caller's transaction (items checked first); their receipts. */
  private async toOutbox(outbox: OutboxWriter, pattern: unknown, items: readonly unknown[]): Promise<OutboxReceipt[]> {
    const now = Date.now();
    const tasks = items.map((item) => this.toItem(item, now));
    return writeOutbox(outbox, this.normalizePattern(pattern as string), tasks, this.options);
  }

  /** The item of a payload or record. */
  private toItem(data: unknown, now = Date.now()): EnqueueItem {
    return taskItem(data, this.options.clientId, now);
  }

  private publishStatus(status: RedisTaskStatus): void {
    this._status$.next(status);
    this.events.emit('status', status);
  }
}
