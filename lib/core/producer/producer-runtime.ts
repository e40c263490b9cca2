import { randomBytes } from 'node:crypto';
import type { ResolvedClientOptions } from '../config/options.js';
import { RedisUnavailableError } from '../model/errors.js';
import {
  closeConnection,
  describeServer,
  NotReadyError,
  openConnection,
  watchOf,
  type OwnedConnection,
} from '../redis/connection.js';
import { checkServer } from '../redis/guardrails.js';
import { PrefixKeys } from '../redis/keys.js';
import { QueueLayouts } from '../redis/layouts.js';
import { TaskStore } from '../redis/store.js';
import type { RedisConnection, TaskRedis } from '../redis/scripts.js';
import { printableLogger, type TaskLogger } from '../support/logger.js';
import { loadTracing } from '../support/tracing.js';
import { TaskProducer } from './producer.js';
import { redisReplyRoute, ReplyInbox } from './replies.js';

/**
 * The composition root of a producer, as `WorkerRuntime` is a worker's: it opens the connection, builds
 * the producer and the reply inbox over it, runs the start-up checks (version, eviction policy) once
 * Redis answers, and closes all of it in reverse. `RedisTaskClient` holds one; nothing else builds these.
 */
export class ProducerRuntime {
  readonly producer: TaskProducer;
  /** Where this client's send() calls hear their replies. */
  readonly inbox: ReplyInbox;
  /** Where Redis is, as errors name it (no password). */
  readonly server: string;
  private readonly connection: OwnedConnection;
  /** The prefix's keys, and the queue layouts this producer enqueues with (a batch works with both). */
  readonly keys: PrefixKeys;
  readonly layouts: QueueLayouts;
  /** The same, with the connection and its script gateway, under one name (a batch takes the store). */
  readonly store: TaskStore;
  private checking: Promise<void> | undefined;
  private closing: Promise<void> | undefined;

  /**
   * Opens the connection and builds the parts over it (tracing loaded first, so nothing is left
   * half-made while the optional package loads). `watch` sees the connection before anything is sent
   * on it (the adapter's status events).
   */
  static async create(
    options: ResolvedClientOptions,
    replyChannel: string,
    logger: TaskLogger,
    watch: (redis: RedisConnection) => void,
  ): Promise<ProducerRuntime> {
    const tracing = await loadTracing(options.tracing);
    return new ProducerRuntime(options, replyChannel, logger, watch, tracing);
  }

  /**
   * The reply channel of a client instance (`<prefix>:replies:<id>`, the id 16 lower-case hex digits, as
   * `aclRule` grants them): one per `RedisTaskClient`.
   */
  static replyChannel(options: ResolvedClientOptions): string {
    return new PrefixKeys(options.prefix).replyChannel(randomBytes(8).toString('hex'));
  }

  private constructor(
    private readonly options: ResolvedClientOptions,
    replyChannel: string,
    private readonly logger: TaskLogger,
    watchConnection: (redis: RedisConnection) => void,
    tracing: Awaited<ReturnType<typeof loadTracing>>,
  ) {
    const keys = new PrefixKeys(options.prefix);
    this.keys = keys;
    this.connection = openConnection(options.connection, 'tasks:client');
    const redis = this.connection.redis;
    watchConnection(redis);
    const watch = watchOf(redis, describeServer(options.connection));
    this.server = watch.server;
    this.layouts = new QueueLayouts(redis, keys, options.shards, logger);
    this.store = new TaskStore(redis, this.layouts);
    this.producer = new TaskProducer(redis, this.layouts, {
      maxPayloadBytes: options.maxPayloadBytes,
      batchChunkSize: options.batchChunkSize,
      deduplicationTtlMs: options.deduplicationTtlMs,
      track: options.track,
      outOfLineBytes: options.outOfLineBytes,
      durability: options.durability,
      enqueueTimeoutMs: options.enqueueTimeoutMs,
      server: watch.server,
      watch,
      ready: () => this.checked(),
      tracing,
      awaitingReply: (keys, task) => this.inbox.handed(keys, task),
      logger: printableLogger(logger),
    });
    this.inbox = new ReplyInbox(
      redisReplyRoute(this.store, this.producer),
      this.producer,
      replyChannel,
      options,
      printableLogger(logger),
      (queue, why) => this.unavailable(queue, why),
    );
  }

  get redis(): TaskRedis {
    return this.connection.redis;
  }

  /**
   * Resolves once Redis answered and the start-up checks passed, or at once when Redis is down (the
   * connection keeps trying, and the first enqueue runs the checks once it answers, or fails within
   * `enqueueTimeoutMs` naming its pattern, with nothing written). Rejects for what no wait heals (a
   * refused password, an untrusted certificate, a refused check): close it then.
   */
  async ready(): Promise<void> {
    try {
      const timeoutMs = this.options.enqueueTimeoutMs;
      // Known refused: connect() resolves now (emits then fail at once), as it does past the timeout.
      await watchOf(this.redis).whenReady(timeoutMs, { refusedForMs: timeoutMs });
    } catch (error) {
      if (error instanceof NotReadyError) return;
      throw error;
    }
    await this.checked();
  }

  /** The start-up checks, once per connection; a failed check runs again next time. */
  checked(): Promise<void> {
    this.checking ??= (async () => {
      await this.redis.ping();
      await checkServer(this.redis, this.options.evictionPolicy, this.logger);
    })().catch((error: unknown) => {
      this.checking = undefined;
      throw error;
    });
    return this.checking;
  }

  /** The error of a call that could not reach Redis in time (nothing was written). */
  unavailable(pattern: string, why: string): RedisUnavailableError {
    return new RedisUnavailableError(pattern, this.server, this.options.enqueueTimeoutMs, false, why);
  }

  /** Closes the reply inbox, the producer (calls waiting are settled) and the connection, in that order; once. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      await this.inbox.close();
      this.producer.close();
      await closeConnection(this.connection);
    })();
    return this.closing;
  }
}
