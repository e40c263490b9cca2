import type { ClaimRequest, ScriptGateway } from '../redis/gateway.js';
import type { TaskStore } from '../redis/store.js';
import { ackBatchOf, turnBatchesOf, type TurnBatches } from './turn-batch.js';
import { Completer } from './completer.js';
import { openBlockingConnection, quit } from '../redis/connection.js';
import type { PrefixKeys, QueueKeys } from '../redis/keys.js';
import type { QueueLayouts } from '../redis/layouts.js';
import { requeueProcessing } from '../redis/requeue.js';
import { SettingsWriter } from '../redis/settings-writer.js';
import type { RedisConnection, TaskRedis } from '../redis/scripts.js';
import { errorMessage, settledBy, type TaskLogger } from '../support/logger.js';
import { ClaimLoop } from './claim-loop.js';
import { BlockingSlot, IdleWait, waitsOnItsBell } from './idle-wait.js';
import type { Waker } from './wake-signals.js';
import { ClaimedTask } from './claimed-task.js';
import { GiveBack } from './give-back.js';
import { Lease } from './lease.js';
import { previousRuns } from './previous-runs.js';
import { TaskRunner } from './runner.js';
import { RunningTasks } from './running.js';
import { Slots, type PatternSlots } from './slots.js';
import { liveConnections, Watchdog, type WatchedLoop } from './watchdog.js';
import type { TaskExecutor, WorkerOptions } from './worker-types.js';

export type { TaskExecution, TaskExecutor, TaskOutcome, WorkerOptions } from './worker-types.js';

/** Longest close waits for Redis once the handlers are done (an outage does not hold a deploy). */
const REDIS_SHUTDOWN_MS = 5_000;

/**
 * A worker, as launcher: registers in every queue shard it consumes, resumes what a previous run of
 * the same id left, then runs one claim loop per shard over shared handler slots, each claimed task
 * handed to the runner; its lease (heartbeat) and watchdog run beside. On close it stops claiming,
 * lets handlers finish for a while, and returns what is left.
 */
export class TaskWorker {
  private readonly slots: Slots;
  private readonly running = new RunningTasks();
  // table-ok: one entry per queue shard
  private readonly loops = new Map<QueueKeys, WatchedLoop>();
  private readonly runner: TaskRunner;
  /** What every claimed task's failures settle through (one per connection, looked up once). */
  private readonly gateway: ScriptGateway;
  /** What every success settles through; it also knows whether shutdown gave the tasks back. */
  private readonly completer: Completer;
  private readonly lease: Lease;
  private readonly watchdog: Watchdog;
  /** What returns tasks this worker will not finish to their queue. */
  private readonly givingBack: GiveBack;
  /** When the worker's connection went down (undefined while it is up). */
  private readonly downSince: () => number | undefined;
  private shards: QueueKeys[] = [];
  /** The process's one blocking connection (opened when claiming starts). */
  private blocking: RedisConnection | undefined;
  private blockingSlot: BlockingSlot | undefined;
  private closing: Promise<void> | undefined;

  private readonly redis: TaskRedis;
  private readonly keys: PrefixKeys;
  private readonly layouts: QueueLayouts;
  /** This turn's starts of tracked or coalesced tasks and reads of out-of-line payloads, one call per shard. */
  private readonly batches: TurnBatches;

  constructor(
    store: TaskStore,
    private readonly options: WorkerOptions,
    executor: TaskExecutor,
    private readonly logger: TaskLogger,
  ) {
    const redis = store.redis;
    this.redis = redis;
    this.keys = store.keys;
    this.layouts = store.layouts;
    this.slots = new Slots(options.concurrency, options.idleSlots);
    this.gateway = store.gateway;
    this.completer = new Completer(ackBatchOf(redis), options);
    this.batches = turnBatchesOf(redis);
    const watch = store.watch;
    const downSince = () => watch.downSince;
    this.downSince = downSince;
    this.runner = new TaskRunner(options, executor, this.completer, logger);
    this.lease = new Lease(
      redis,
      this.gateway,
      this.running,
      (keys) => this.completer.unacknowledged(keys),
      options,
      logger,
      downSince,
    );
    this.givingBack = new GiveBack(redis, options, this.running, logger);
    this.watchdog = new Watchdog(
      liveConnections(redis),
      this.loops,
      this.lease,
      this.running,
      options,
      logger,
      downSince,
    );
  }

  get workerId(): string {
    return this.options.workerId;
  }

  /**
   * Registers in every shard of `queues` (its group, the pattern's rate and cap, the client weights,
   * the pattern list), resumes what a previous run of this worker id left, and takes the lease. The
   * commands of a step that do not depend on each other go out together: one round trip per step, not
   * one per command (a worker's start-up is part of every drain it begins).
   */
  async register(queues: readonly string[]): Promise<void> {
    // Every shard of every queue: the count is checked against the one on record first.
    const layouts = await this.layouts.layouts(queues);
    const shards = layouts.flatMap((layout) => layout.shards);
    // Before anything is written or resumed: another process may be alive under this id. Refused, this
    // worker holds no shard, so its close returns (and deregisters) nothing of that live worker.
    const previous = await previousRuns(
      this.redis,
      shards,
      this.workerId,
      this.options.heartbeatIntervalMs,
      this.logger,
    );
    this.shards = shards;
    await new SettingsWriter(this.redis, this.logger).register(
      layouts,
      this.keys.queues,
      this.options.patterns,
      this.options.clientWeights,
    );
    for (const [index, keys] of this.shards.entries()) {
      if (!previous[index]) continue;
      const { requeued, malformed } = await requeueProcessing(this.redis, keys, this.options, {
        countAttempt: true,
        logger: this.logger,
      });
      if (requeued + malformed > 0) {
        this.logger.log(
          `worker ${this.workerId} resumed ${requeued} task(s) of "${keys.queue}" left by its previous run`,
        );
      }
    }
    await Promise.all(this.shards.map((keys) => this.lease.take(keys)));
  }

  /** Starts the lease, a claim loop per registered shard, and the watchdog. */
  startClaiming(): void {
    this.lease.start(() => this.shards);
    if (this.shards.length === 0) return; // no handler: no claim loop, so no connection to lend one
    // One blocking connection for the process, lent to one idle loop at a time (see BlockingSlot).
    const blocking = new BlockingSlot(
      openBlockingConnection(this.redis, `tasks:worker:${this.workerId}:wait`),
      waitsOnItsBell(this.shards.length),
      { interrupter: this.redis },
    );
    this.blocking = blocking.connection;
    this.blockingSlot = blocking;
    for (const keys of this.shards) {
      const waker = this.options.wakeSignals.waker(keys.wakeChannel);
      const gateway = wakingGateway(this.gateway, waker);
      const idle = new IdleWait(waker, gateway, keys, this.options.blockTimeoutMs, blocking);
      // The pattern's slots (shared by its shards' loops): its cap, and its fair share of the pool.
      const slots = this.slots.ofPattern(keys.queue, this.options.patterns.concurrency(keys.queue));
      const loop = new ClaimLoop(
        { gateway, idle, downSince: this.downSince },
        keys,
        this.completer.shard(keys),
        slots,
        // spread-ok: once per claim loop
        { ...this.options, clientConcurrency: this.options.patterns.clientConcurrency(keys.queue) },
        {
          onClaimed: (token, entry, recorded, keep) => {
            this.lease.claimed(keys);
            const task = new ClaimedTask(this.gateway, keys, token, entry, this.options, this.batches, recorded, keep);
            this.dispatch(task, slots);
          },
          register: () => this.lease.take(keys),
          onThrottled: (dueAt) => this.options.onDelayed?.(keys.queue, dueAt),
          giveBack: (pairs) => void this.givingBack.unstarted(keys, pairs),
        },
        this.logger,
      );
      this.loops.set(keys, { loop, blocking: blocking.connection });
      loop.start();
    }
    this.watchdog.start();
  }

  /**
   * A message on a queue shard's control channel: a resume (its loop claims again at once), or a running task
   * of this worker revoked (cancelled or superseded: its handler is told now, not at the next heartbeat).
   */
  control(controlChannel: string, message: string): void {
    for (const [keys, { loop }] of this.loops) {
      if (keys.controlChannel !== controlChannel) continue;
      if (message === 'resume') loop.resume();
      else this.lease.revoked(keys, message);
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
    // Runs with durable steps give their tasks back at their next step boundary, their finished steps kept.
    this.completer.stopping = true;
    const loops = [...this.loops.values()].map(({ loop }) => loop);
    this.watchdog.stop();
    const leaseStopped = this.lease.stop();
    const loopsClosed = Promise.all(loops.map((loop) => loop.close()));
    // The idle loops' watch of their bells (if one is under way) ends with its connection: no loop waits any more.
    this.blockingSlot?.close();
    const started = Date.now();
    const running = this.running.count;
    const waitMs = this.options.shutdownTimeoutMs;
    this.logger.log(
      `worker ${this.workerId} stopping: no new claims; ${running === 0 ? 'no handler is running' : `waiting up to ${waitMs} ms for ${running} running handler(s)`}`,
    );
    await this.running.settled(waitMs);
    const unfinished = this.running.count;
    if (unfinished > 0)
      this.logger.warn(
        `worker ${this.workerId}: ${unfinished} handler(s) still running after ${waitMs} ms (shutdownTimeoutMs) are told to stop; their tasks go back to their queue`,
      );
    // What is left needs Redis. Past REDIS_SHUTDOWN_MS of an outage, close does not wait for it to end:
    // the tasks stay in this worker's processing hash, where the reaper finds them once the lease
    // expires (or a restart with the same id resumes them). Nothing is lost; they are only late.
    const deadline = Date.now() + REDIS_SHUTDOWN_MS;
    let released = await settledBy(loopsClosed, deadline);
    // Succeeded tasks must be acknowledged before what is left is returned to the queue.
    if (released) released = await settledBy(Promise.all(loops.map((loop) => loop.flushAcks())), deadline);
    if (released) released = await settledBy(leaseStopped, deadline);
    this.completer.release();
    this.running.abortAll(new Error('worker shut down before the handler finished'));
    const now = Date.now();
    for (const keys of this.shards) {
      if (
        !released ||
        this.redis.status !== 'ready' ||
        !(await settledBy(this.givingBack.onShutdown(keys, now), deadline))
      ) {
        released = false;
        break;
      }
    }
    if (!released) {
      this.logger.warn(
        `closing while Redis is unreachable: unfinished tasks stay held by worker ${this.workerId}; ` +
          'they return to their queue when its lease expires (a reaper recovers them) or when it restarts with the same id',
      );
    }
    if (this.blocking) await quit(this.blocking);
    this.logger.log(`worker ${this.workerId} stopped in ${Date.now() - started} ms`);
  }

  private dispatch(task: ClaimedTask, slots: PatternSlots): void {
    const run = this.running.begin(task.keys, task.token);
    const finished = () => {
      this.running.end(run);
      slots.release();
    };
    run.done = this.runner.run(task, run).then(finished, (error: unknown) => {
      // A bug of ours (or a value no code could handle) must not take the process down, nor loop: the task
      // goes back to its queue with this run counted as an attempt, so the worst case is a dead letter
      // (`interrupted`, once its attempts are used up), never a task that runs for ever. Fenced on the
      // token: a task this run settled already is left alone.
      this.logger.error(
        `internal error while running a task of "${task.keys.queue}": ${errorMessage(error)}; it goes back to its queue, the attempt counted`,
      );
      finished();
      if (this.completer.released) return;
      this.givingBack.afterInternalError(task);
    });
  }
}

/** A loop's claim gateway: each claim that asks for tasks answers the wake messages heard before it was sent. */
function wakingGateway(gateway: ScriptGateway, waker: Waker): Pick<ScriptGateway, 'claim'> {
  return {
    claim: (shard: QueueKeys, request: ClaimRequest) => {
      if (request.wanted > 0) waker.claiming();
      return gateway.claim(shard, request);
    },
  };
}
