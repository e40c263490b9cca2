import { ClaimLoop } from './claim-loop.js';
import { ClaimedTask, type SettleOptions } from './claimed-task.js';
import { decodeEntry, guessTaskId, type TaskEnvelope } from '../model/codec.js';
import { forceReconnect, openBlockingConnection, quit, watchOf } from '../redis/connection.js';
import { toErrorRecord, type ErrorRecord } from '../model/dead-letter.js';
import { HandlerTimeoutError, isNonRetryable, UnserializableResultError } from '../model/errors.js';
import { DEFAULT_GROUP, type PrefixKeys, type QueueKeys } from '../redis/keys.js';
import { errorMessage, OutageReporter, sleep, type TaskLogger } from '../support/logger.js';
import { requeueProcessing } from '../redis/requeue.js';
import { backoffDelay, mergeRetry, type RetryPolicy } from '../model/retry-policy.js';
import { gatewayOf, type Heartbeat, type ScriptGateway } from '../redis/gateway.js';
import type { RedisConnection, TaskRedis } from '../redis/scripts.js';
import { LazyAbort } from '../support/lazy-abort.js';
import type { TaskOutcomeEvent } from '../model/outcomes.js';
import type { ShardCounts } from '../redis/layouts.js';
import { Slots } from './slots.js';

/** What the worker hands to the code that runs a task (the Nest adapter, in this package). */
export interface TaskExecution {
  readonly queue: string;
  readonly id: string;
  readonly clientId: string;
  /** 1-based number of this run. */
  readonly attempt: number;
  readonly maxAttempts: number;
  readonly enqueuedAt: number;
  readonly payload: unknown;
  readonly workerId: string;
  /** The consumer group this worker belongs to (`default` unless the transport names one). */
  readonly group: string;
  readonly expectsReply: boolean;
  /** Aborted when the worker gives up on this run (lease lost, shutdown timeout). */
  readonly signal: AbortSignal;
}

export type TaskOutcome =
  | {
      readonly status: 'succeeded';
      readonly response?: unknown;
      /** The reply to a `send()` caller, serialized (set by the worker before settling). */
      readonly reply?: string;
    }
  | {
      readonly status: 'failed';
      /** The handler's own error where it can be had (dead letters record it). */
      readonly error: unknown;
      /** What a `send()` caller receives (for Nest: the exception filter's output). */
      readonly replyError?: unknown;
    };

export type TaskExecutor = (execution: TaskExecution) => Promise<TaskOutcome>;

export interface WorkerOptions extends SettleOptions {
  readonly concurrency: number;
  readonly prefetch: number;
  readonly heartbeatIntervalMs: number;
  readonly leaseMs: number;
  readonly shutdownTimeoutMs: number;
  readonly blockTimeoutMs: number;
  /** Attempts and backoff of a queue (transport defaults merged with the pattern's own). */
  readonly retryPolicy: (queue: string) => RetryPolicy;
  /** Per-client cap on tasks in flight of a queue (0: none). */
  readonly clientCap: (queue: string) => number;
  /** Called with the due time of every retry this worker schedules (to promote it on time). */
  readonly onDelayed?: (queue: string, dueAt: number) => void;
  /** How long past its due time a Redis command may go unanswered before the watchdog reconnects. */
  readonly watchdogTimeoutMs: number;
  /** Told when the watchdog finds Redis stopped answering (true) and when it answers again (false). */
  readonly onStall?: (stalled: boolean) => void;
  /** The consumer group: each group gets its own copy of every task of the patterns it consumes. */
  readonly group?: string;
  /** Tasks per second each client of a queue may start (0: no limit), written to every shard at start. */
  readonly rateLimit?: (queue: string) => number;
  /** Claim weights of clients, written to every queue at start (1 removes a weight). */
  readonly clientWeights?: Readonly<Record<string, number>>;
  /** Told how each run ended (completed, retried, dead-lettered, lease lost); never given the payload. */
  readonly onOutcome?: (event: TaskOutcomeEvent) => void;
  /** Longest run of a queue's handler before it is abandoned as failed with reason `timeout` (0: none). */
  readonly handlerTimeout?: (queue: string) => number;
  /**
   * A run going on this long is logged as slow (once), and if the worker shuts down before it ends,
   * the interruption counts as an attempt (so a task that hangs every run ends in dead letters).
   */
  readonly slowRunMs: number;
}

interface InFlight {
  readonly keys: QueueKeys;
  readonly token: string;
  readonly abort: LazyAbort;
  done?: Promise<void>;
  leaseLost?: boolean;
  /** When its handler started (Date.now()), once it has. */
  startedAt?: number;
  /** What the slow-run warning names (read only when it is given). */
  about?: TaskEnvelope;
  attempt?: number;
  warnedSlow?: boolean;
}

const SETTLE_RETRY_MS = [50, 200, 500, 1_000];

/**
 * A worker: holds a lease in every queue (shard) it consumes (renewed by its heartbeat), runs one claim
 * loop per queue shard over shared handler slots, and settles each task through fenced scripts: acknowledge,
 * retry with backoff, or dead letters.
 */
export class TaskWorker {
  private readonly slots: Slots;
  private readonly gateway: ScriptGateway;
  private readonly loops = new Map<QueueKeys, ClaimLoop>();
  private readonly blocking = new Map<ClaimLoop, RedisConnection>();
  private watchdog: NodeJS.Timeout | undefined;
  /** Reported once when the watchdog finds a loop Redis stopped answering, and once when it answers again. */
  private readonly stall: OutageReporter;
  private stalled = false;
  private readonly reconnectedAt = new Map<RedisConnection, number>();
  private beatingSince = 0;
  private readonly inFlight = new Map<string, InFlight>();
  private readonly heartbeatOutage: OutageReporter;
  /** When the command connection was lost, if it is down now. */
  private readonly downSince: () => number | undefined;
  /** Tokens seen in a processing hash without a running task at the previous heartbeat, per shard. */
  private readonly orphanSuspects = new Map<string, Set<string>>();
  private queues: QueueKeys[] = [];
  private heartbeat: NodeJS.Timeout | undefined;
  private beating: Promise<void> | undefined;
  private closing: Promise<void> | undefined;
  /** Set once shutdown has returned unfinished tasks: late handlers must not try to settle. */
  private released = false;

  constructor(
    private readonly redis: TaskRedis,
    private readonly keys: PrefixKeys,
    private readonly layouts: ShardCounts,
    private readonly options: WorkerOptions,
    private readonly executor: TaskExecutor,
    private readonly logger: TaskLogger,
  ) {
    this.slots = new Slots(options.concurrency);
    this.gateway = gatewayOf(redis);
    const watch = watchOf(redis);
    this.downSince = () => watch.downSince;
    this.heartbeatOutage = new OutageReporter(logger, 'worker heartbeat', this.downSince);
    this.stall = new OutageReporter(logger, `Redis, as the watchdog of worker ${options.workerId} sees it,`, this.downSince);
  }

  get workerId(): string {
    return this.options.workerId;
  }

  /** Tasks being handled right now. */
  get running(): number {
    return this.inFlight.size;
  }

  /** The lease written at each heartbeat: a blocked loop may miss one heartbeat and keep it. */
  private get leaseWithGrace(): number {
    return this.options.leaseMs + this.options.heartbeatIntervalMs;
  }

  /**
   * Registers, resumes what this worker id's processing hashes still hold (a previous run of the
   * same id was interrupted), then starts claiming.
   */
  async start(queues: readonly string[]): Promise<void> {
    // Every shard of every queue: the count is checked against the one on record first.
    const layouts = await this.layouts.layouts(queues);
    this.queues = layouts.flatMap((layout) => layout.shards);
    for (const layout of layouts) {
      const rate = this.options.rateLimit?.(layout.queue) ?? 0;
      for (const keys of layout.shards) {
        // From now on every task emitted for the pattern gets a copy for this group.
        await this.redis.sadd(keys.groups, keys.group);
        await (rate > 0 ? this.redis.hset(keys.rates, '*', rate) : this.redis.hdel(keys.rates, '*'));
      }
      for (const [clientId, weight] of Object.entries(this.options.clientWeights ?? {})) {
        const keys = layout.shardOf(clientId);
        await (weight === 1 ? this.redis.hdel(keys.weights, clientId) : this.redis.hset(keys.weights, clientId, weight));
      }
    }
    if (queues.length > 0) {
      await this.redis.sadd(this.keys.queues, ...queues);
    }
    for (const keys of this.queues) {
      const previous = await this.redis.zscore(keys.workers, this.workerId);
      if (previous !== null) {
        const { requeued, malformed } = await requeueProcessing(this.redis, keys, this.options, {
          countAttempt: true,
          logger: this.logger,
        });
        if (requeued + malformed > 0) {
          this.logger.log(`worker ${this.workerId} resumed ${requeued} task(s) of "${keys.queue}" left by its previous run`);
        }
      }
      await this.gateway.heartbeat(keys, this.workerId, this.leaseWithGrace);
    }
    this.heartbeat = setInterval(() => {
      if (this.beating) return;
      this.beatingSince = Date.now();
      this.beating = this.beat().finally(() => {
        this.beating = undefined;
      });
    }, this.options.heartbeatIntervalMs);
    this.heartbeat.unref();
    for (const keys of this.queues) {
      const blocking = openBlockingConnection(this.redis, `tasks:worker:${this.workerId}`);
      const loop = new ClaimLoop(
        this.redis,
        blocking,
        keys,
        this.slots,
        { ...this.options, clientConcurrency: this.options.clientCap(keys.queue) },
        {
          onClaimed: (token, entry) => this.dispatch(new ClaimedTask(this.redis, keys, token, entry, this.options)),
          register: () => this.renew(keys).then(() => undefined),
          onThrottled: (dueAt) => this.options.onDelayed?.(keys.queue, dueAt),
        },
        this.logger,
      );
      this.loops.set(keys, loop);
      this.blocking.set(loop, blocking);
      loop.start();
    }
    this.watchdog = setInterval(() => this.inspect(), Math.min(1_000, Math.max(25, this.options.watchdogTimeoutMs / 4)));
    this.watchdog.unref();
  }

  /**
   * The watchdog: restarts a claim loop that ended unexpectedly, and when Redis has not answered a
   * loop's (or the heartbeat's) command for `watchdogTimeoutMs` past what it may take, cuts that
   * connection so ioredis reconnects and sends the command again (a half-open TCP connection, a
   * failover that left a socket hanging). Nothing else notices those: no error is ever raised.
   */
  private inspect(): void {
    const now = Date.now();
    this.warnSlowRuns(now);
    let stalled = false;
    for (const [keys, loop] of this.loops) {
      const died = loop.died;
      if (died) {
        this.logger.error(`watchdog: the claim loop of "${keys.queue}" stopped unexpectedly (${errorMessage(died.error)}); restarting it`);
        loop.restart();
      }
      const overdue = loop.overdue(now);
      if (overdue && overdue.overdueMs > this.options.watchdogTimeoutMs) {
        stalled = true;
        const connection = overdue.connection === 'blocking' ? this.blocking.get(loop) : this.redis;
        if (connection && connection.status === 'reconnecting') {
          // Not a half-open socket: ioredis knows Redis is gone and is already trying again.
          this.stall.failed(new Error(`Redis is unreachable: claiming from "${keys.queue}" waits on a connection that is reconnecting`));
        } else if (connection) {
          this.stall.failed(new Error(describeStall(`claiming from "${keys.queue}"`, overdue.overdueMs, overdue.connection, connection.status)));
          this.reconnect(connection, now);
        }
      }
    }
    if (this.beating && now - this.beatingSince > this.options.heartbeatIntervalMs + this.options.watchdogTimeoutMs) {
      stalled = true;
      if (this.redis.status === 'reconnecting') {
        this.stall.failed(new Error('Redis is unreachable: the heartbeat waits on a connection that is reconnecting'));
      } else {
        this.stall.failed(new Error(describeStall('the heartbeat', now - this.beatingSince, 'command', this.redis.status)));
        this.reconnect(this.redis, now);
      }
    }
    if (stalled !== this.stalled) {
      this.stalled = stalled;
      if (!stalled) this.stall.succeeded();
      this.options.onStall?.(stalled);
    }
  }

  private reconnect(connection: RedisConnection, now: number): void {
    if (now - (this.reconnectedAt.get(connection) ?? 0) < this.options.watchdogTimeoutMs) {
      return; // give the last reconnection time to work
    }
    this.reconnectedAt.set(connection, now);
    forceReconnect(connection);
  }

  /** A resume was announced on a queue shard's control channel: its loop claims again at once. */
  resume(controlChannel: string): void {
    for (const [keys, loop] of this.loops) {
      if (keys.controlChannel === controlChannel) loop.resume();
    }
  }

  /**
   * Stops claiming, waits up to `shutdownTimeoutMs` for running handlers, then returns what is still
   * unfinished to the heads of its clients' lists without counting an attempt, and deregisters.
   */
  close(): Promise<void> {
    this.closing ??= this.shutdown();
    return this.closing;
  }

  private async shutdown(): Promise<void> {
    clearInterval(this.heartbeat);
    clearInterval(this.watchdog);
    await Promise.all([...this.loops.values()].map((loop) => loop.close()));
    await this.waitForRunning(this.options.shutdownTimeoutMs);
    // Succeeded tasks must be acknowledged before what is left is returned to the queue.
    await Promise.all([...this.loops.values()].map((loop) => loop.flushAcks()));
    await this.beating;
    this.released = true;
    for (const running of this.inFlight.values()) {
      running.abort.abort(new Error('worker shut down before the handler finished'));
    }
    const now = Date.now();
    for (const keys of this.queues) {
      try {
        // A run that went on past slowRunMs counts as an attempt: a task that hangs every run must end in
        // dead letters, not come back after every restart. Shorter runs (a deploy) count nothing.
        const long = [...this.inFlight.values()]
          .filter((run) => run.keys === keys && run.startedAt !== undefined && now - run.startedAt >= this.options.slowRunMs)
          .map((run) => run.token);
        const counted = long.length === 0 ? { requeued: 0 } : await requeueProcessing(this.redis, keys, this.options, {
          countAttempt: true,
          tokens: long,
          logger: this.logger,
        });
        const { requeued } = await requeueProcessing(this.redis, keys, this.options, {
          countAttempt: false,
          logger: this.logger,
        });
        if (requeued + counted.requeued > 0) {
          this.logger.warn(
            `returned ${requeued + counted.requeued} unfinished task(s) of "${keys.queue}" to their queue on shutdown` +
              (counted.requeued > 0 ? ` (${counted.requeued} had run past slowRunMs: attempt counted)` : ''),
          );
        }
        await this.redis.zrem(keys.workers, this.workerId);
        await this.redis.hdel(keys.heartbeats, this.workerId);
      } catch (error) {
        // The tasks stay in this worker's processing hash: a restart with the same id, or recovery of
        // a dead worker, returns them. Nothing is lost, so shutdown goes on.
        this.logger.error(`could not return unfinished tasks of "${keys.queue}" on shutdown: ${errorMessage(error)}`);
      }
    }
    await Promise.all([...this.blocking.values()].map((connection) => quit(connection)));
  }

  private async waitForRunning(timeoutMs: number): Promise<void> {
    if (this.inFlight.size === 0) {
      return;
    }
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
    });
    await Promise.race([Promise.allSettled([...this.inFlight.values()].map((run) => run.done)), timeout]);
    clearTimeout(timer);
  }

  private renew(keys: QueueKeys, running: string[] = []): Promise<Heartbeat> {
    return this.gateway.heartbeat(keys, this.workerId, this.leaseWithGrace, running);
  }

  /**
   * Renews the lease in every queue and reconciles: a running task whose token the hash lost was
   * recovered by a reaper (this worker's lease had expired), so its handler is told to stop; a token
   * the hash holds but no handler runs, twice in a row, is a claim whose reply never arrived, so it
   * goes back to its queue.
   */
  private async beat(): Promise<void> {
    try {
      for (const keys of this.queues) {
        // Tokens whose acknowledgement is queued are still held in Redis: they count as running.
        const running = [...this.inFlight.values()].filter((run) => run.keys === keys).map((run) => run.token);
        running.push(...(this.loops.get(keys)?.unacknowledged ?? []));
        const { lost, orphaned } = await this.renew(keys, running);
        for (const token of lost) {
          const run = this.inFlight.get(inFlightId(keys, token));
          if (run && !run.leaseLost) {
            run.leaseLost = true;
            run.abort.abort(new Error('the task was recovered by another process: this worker lost its lease'));
            this.logger.warn(`lost the lease of a task of "${keys.queue}" (token ${token}); its handler was told to stop`);
          }
        }
        await this.requeueOrphans(keys, orphaned);
      }
      this.heartbeatOutage.succeeded();
    } catch (error) {
      this.heartbeatOutage.failed(error);
    }
  }

  private async requeueOrphans(keys: QueueKeys, orphaned: string[]): Promise<void> {
    const previous = this.orphanSuspects.get(keys.root) ?? new Set<string>();
    const confirmed = orphaned.filter((token) => previous.has(token));
    this.orphanSuspects.set(keys.root, new Set(orphaned.filter((token) => !previous.has(token))));
    if (confirmed.length > 0) {
      const { requeued } = await requeueProcessing(this.redis, keys, this.options, {
        countAttempt: false,
        tokens: confirmed,
        logger: this.logger,
      });
      this.logger.warn(`returned ${requeued} task(s) of "${keys.queue}" whose claim reply was lost to their queue`);
    }
  }

  private dispatch(task: ClaimedTask): void {
    const id = inFlightId(task.keys, task.token);
    const run: InFlight = { keys: task.keys, token: task.token, abort: new LazyAbort() };
    if (this.inFlight.has(id)) {
      // Tokens are unique per claim call, so this cannot happen; if it ever did, overwriting the running
      // task's state would let one run settle the other. The claim stays held and is recovered.
      this.logger.error(`claimed token ${id} of "${task.keys.queue}" is already running here; left for recovery`);
      this.slots.release();
      return;
    }
    this.inFlight.set(id, run);
    const finished = () => {
      this.inFlight.delete(id);
      this.slots.release();
    };
    run.done = this.run(task, run).then(finished, (error: unknown) => {
      // A bug of ours must not take the process down: the task stays in the processing hash, where
      // the orphan check or a restart returns it to its queue.
      this.logger.error(`internal error while running a task of "${task.keys.queue}": ${errorMessage(error)}; it stays held for recovery`);
      finished();
    });
  }

  private async run(task: ClaimedTask, run: InFlight): Promise<void> {
    const queue = task.keys.queue;
    const decoded = decodeEntry(task.raw);
    if (!decoded.ok) {
      // Not a task we can run, and retrying cannot fix it: set it aside with the reason.
      if (await this.settle(task, () => task.deadLetter({ reason: 'malformed', attempts: 0, detail: decoded.reason }))) {
        this.report({ outcome: 'dead-lettered', queue, id: guessTaskId(task.raw), attempt: 0, durationMs: 0, reason: 'malformed' });
      }
      this.logger.warn(`moved malformed task ${guessTaskId(task.raw) ?? '(no id)'} of "${queue}" to dead letters: ${decoded.reason}`);
      return;
    }
    const { envelope, attempts } = decoded.entry;
    const policy = mergeRetry(this.options.retryPolicy(queue), envelope);
    const attempt = attempts + 1;
    const about = { queue, id: envelope.id, clientId: envelope.clientId };
    if (attempt > policy.maxAttempts) {
      // Earlier runs never finished (worker died or lost its lease each time): do not start another.
      const detail =
        `${attempts} run(s) were interrupted before finishing (the worker died, lost its lease, or shut down during a run longer than slowRunMs); ` +
        `maxAttempts is ${policy.maxAttempts}`;
      const settled = await this.settle(task, () =>
        task.deadLetter({
          reason: 'interrupted',
          attempts,
          envelope,
          detail,
          error: { name: 'InterruptedError', message: detail },
        }),
      );
      if (settled) this.report({ ...about, outcome: 'dead-lettered', attempt: 0, durationMs: 0, reason: 'interrupted' });
      this.logger.warn(`task ${envelope.id} of "${queue}" moved to dead letters: ${detail}`);
      return;
    }
    if (envelope.expiresAt !== undefined && envelope.expiresAt <= Date.now()) {
      const detail = `expired at ${new Date(envelope.expiresAt).toISOString()} before a worker could start it`;
      if (await this.settle(task, () => task.deadLetter({ reason: 'expired', attempts, envelope, detail }), envelope)) {
        this.report({ ...about, outcome: 'dead-lettered', attempt: 0, durationMs: 0, reason: 'expired' });
      }
      this.logger.warn(`task ${envelope.id} of "${queue}" moved to dead letters: ${detail}`);
      return;
    }
    const startedAt = performance.now();
    run.startedAt = Date.now();
    run.about = envelope;
    run.attempt = attempt;
    let outcome = await this.execute(envelope, queue, attempt, policy.maxAttempts, run.abort);
    const ran = { ...about, attempt, durationMs: performance.now() - startedAt };
    if (run.leaseLost) {
      this.report({ ...ran, outcome: 'lease-lost' });
    }
    if (this.released || run.leaseLost) {
      // The task was returned to its queue (shutdown) or recovered elsewhere (lease lost): it is not
      // ours to settle any more, and the fenced scripts would refuse it anyway.
      this.logger.warn(`task ${envelope.id} of "${queue}" finished after this worker gave it up; its outcome was discarded`);
      return;
    }
    if (outcome.status === 'succeeded' && envelope.replyTo !== undefined) {
      // Serialized before settling: a result that cannot be sent fails the task now (with an error the
      // caller receives), instead of a settle that could never be written.
      const reply = serializeReply(envelope.id, outcome.response);
      outcome = typeof reply === 'string'
        ? { status: 'succeeded', response: outcome.response, reply }
        : { status: 'failed', error: new UnserializableResultError(queue, reply.reason) };
    }
    if (outcome.status === 'succeeded') {
      const loop = this.loops.get(task.keys);
      if (envelope.replyTo === undefined && envelope.dedupKey === undefined && loop && !this.released) {
        // The common case rides on the claim loop's next call (acknowledged in batches).
        void loop.acknowledge(task.token).then((held) => {
          if (held) this.report({ ...ran, outcome: 'completed' });
          else this.warnLeaseLost(task, envelope, ran);
        });
        return;
      }
      const reply = outcome.reply;
      if (await this.settle(task, () => task.acknowledge(envelope, reply), envelope, ran)) {
        this.report({ ...ran, outcome: 'completed' });
      }
      return;
    }
    const error = toErrorRecord(outcome.error);
    const timedOut = outcome.error instanceof HandlerTimeoutError;
    const nonRetryable = isNonRetryable(outcome.error);
    const final = nonRetryable || attempt >= policy.maxAttempts;
    if (final) {
      const detail = nonRetryable ? 'non-retryable error' : `failed all ${policy.maxAttempts} attempt(s)`;
      const reason = timedOut ? 'timeout' : 'failed';
      const replyError = outcome.error instanceof UnserializableResultError ? error : outcome.replyError;
      const settled = await this.settle(
        task,
        () => task.deadLetter({ reason, attempts: attempt, envelope, detail, error, replyError }),
        envelope,
        ran,
      );
      if (settled) {
        this.report({ ...ran, outcome: 'dead-lettered', reason, error });
        this.logger.warn(`task ${envelope.id} of "${queue}" moved to dead letters (${detail}): ${error.message}`);
      }
      return;
    }
    const delay = backoffDelay(policy.backoff, attempt);
    let dueAt: number | undefined;
    await this.settle(task, async () => {
      dueAt = await task.retry(delay);
      return dueAt !== undefined;
    }, envelope, ran);
    if (dueAt !== undefined) {
      this.report({ ...ran, outcome: 'retried', error, retryInMs: delay });
      this.logger.warn(`task ${envelope.id} of "${queue}" failed attempt ${attempt}/${policy.maxAttempts} (${error.message}); retrying in ${delay} ms`);
      this.options.onDelayed?.(queue, dueAt);
    }
  }

  /**
   * Runs a fenced settle script, retrying through Redis outages until it answers: a task whose
   * outcome cannot be written stays in this worker's processing hash, neither acknowledged nor lost.
   * Resolves false when the worker no longer holds the task (logged once).
   */
  private async settle(
    task: ClaimedTask,
    write: () => Promise<boolean>,
    envelope?: TaskEnvelope,
    ran?: Omit<TaskOutcomeEvent, 'outcome' | 'workerId'>,
  ): Promise<boolean> {
    for (let attempt = 0; ; attempt++) {
      try {
        const settled = await write();
        if (!settled) {
          this.warnLeaseLost(task, envelope, ran);
        }
        return settled;
      } catch (error) {
        if (this.released) {
          this.logger.error(`could not settle a task of "${task.keys.queue}" before shutdown: ${errorMessage(error)}`);
          return false;
        }
        if (attempt === 0) {
          this.logger.error(`could not settle a task of "${task.keys.queue}" (${errorMessage(error)}); retrying`);
        }
        await sleep(SETTLE_RETRY_MS[Math.min(attempt, SETTLE_RETRY_MS.length - 1)]);
      }
    }
  }

  private warnLeaseLost(task: ClaimedTask, envelope?: TaskEnvelope, ran?: Omit<TaskOutcomeEvent, 'outcome' | 'workerId'>): void {
    this.report({ queue: task.keys.queue, id: envelope?.id, clientId: envelope?.clientId, attempt: 0, durationMs: 0, ...ran, outcome: 'lease-lost' });
    this.logger.warn(
      `task ${envelope?.id ?? task.token} of "${task.keys.queue}" is no longer held by this worker (lease lost); its outcome was discarded`,
    );
  }

  /** Tells the outcome listener; a listener that throws is logged, never allowed to affect the task. */
  private report(event: Omit<TaskOutcomeEvent, 'workerId'>): void {
    if (!this.options.onOutcome) return;
    try {
      this.options.onOutcome({ ...event, workerId: this.workerId });
    } catch (error) {
      this.logger.error(`a task outcome listener threw: ${errorMessage(error)}`);
    }
  }

  private async execute(
    envelope: TaskEnvelope,
    queue: string,
    attempt: number,
    maxAttempts: number,
    abort: LazyAbort,
  ): Promise<TaskOutcome> {
    const timeoutMs = this.options.handlerTimeout?.(queue) ?? 0;
    let running: Promise<TaskOutcome>;
    try {
      running = this.executor({
        queue,
        id: envelope.id,
        clientId: envelope.clientId,
        attempt,
        maxAttempts,
        enqueuedAt: envelope.enqueuedAt,
        payload: envelope.payload,
        workerId: this.workerId,
        group: this.options.group ?? DEFAULT_GROUP,
        expectsReply: envelope.replyTo !== undefined,
        get signal() {
          return abort.signal;
        },
      });
    } catch (error) {
      return { status: 'failed', error };
    }
    if (timeoutMs <= 0) {
      // No timeout: the handler's own rejection is its failure (one promise less per task).
      return running.catch((error: unknown): TaskOutcome => ({ status: 'failed', error }));
    }
    running = running.catch((error: unknown): TaskOutcome => ({ status: 'failed', error }));
    // The handler is told through ctx.signal and abandoned: its slot is freed and the run counts as a
    // failed attempt, even if it ignores the signal and goes on in the background.
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<TaskOutcome>((resolve) => {
      timer = setTimeout(() => {
        const error = new HandlerTimeoutError(queue, timeoutMs);
        abort.abort(error);
        this.logger.warn(`task ${envelope.id} of "${queue}" passed its handler timeout of ${timeoutMs} ms; abandoned as failed`);
        resolve({ status: 'failed', error });
      }, timeoutMs);
    });
    try {
      return await Promise.race([running, timedOut]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Warns once about each run going on past `slowRunMs` (a hang that nothing else reports). */
  private warnSlowRuns(now: number): void {
    for (const run of this.inFlight.values()) {
      if (run.startedAt !== undefined && !run.warnedSlow && now - run.startedAt >= this.options.slowRunMs) {
        run.warnedSlow = true;
        this.logger.warn(
          `task ${run.about?.id ?? '?'} of "${run.keys.queue}" (attempt ${run.attempt ?? '?'}) has been running for ${now - run.startedAt} ms (slowRunMs ${this.options.slowRunMs}); ` +
            'if the worker shuts down before it ends, the interruption counts as an attempt',
        );
      }
    }
  }
}

/** What the watchdog found, in words: an open connection that stopped answering, or a stuck handshake. */
function describeStall(what: string, overdueMs: number, connection: string, status: string): string {
  return status === 'ready'
    ? `${what} got no reply for ${overdueMs} ms past its due time on the ${connection} connection, which looks open (half-open, or a stalled server); reconnecting it`
    : `${what} has waited ${overdueMs} ms past its due time on the ${connection} connection, stuck while connecting (status ${status}); reconnecting it`;
}

/** The reply to a `send()` caller as JSON, or why the response cannot be one. */
function serializeReply(id: string, response: unknown): string | { reason: string } {
  try {
    return JSON.stringify({ id, response: response ?? null });
  } catch (error) {
    return { reason: errorMessage(error) };
  }
}

function inFlightId(keys: QueueKeys, token: string): string {
  // Tokens are unique per process; the shard's root keeps ids of different shards apart all the same.
  return `${keys.root}\u0000${token}`;
}

export type { ErrorRecord };
