import { setImmediate as nextTurn } from 'node:timers/promises';
import { unlessAborted } from '../support/abortable.js';
import { watchOf } from '../redis/connection.js';
import { gatewayOf, type ClaimReply, type ScriptGateway } from '../redis/gateway.js';
import type { QueueKeys } from '../redis/keys.js';
import { OutageReporter, sleep, type TaskLogger } from '../support/logger.js';
import type { RedisConnection, TaskRedis } from '../redis/scripts.js';
import { ClaimAcks, nextTokenPrefix, type TakenAck } from './claim-acks.js';
import { OperationsUnderWay, type Overdue } from './overdue.js';
import type { Slots } from './slots.js';

export type { LoopConnection, Overdue } from './overdue.js';

export interface ClaimLoopOptions {
  readonly workerId: string;
  readonly prefetch: number;
  readonly blockTimeoutMs: number;
  /** Most tasks of one client in flight at once across all workers of the queue (0: no cap). */
  readonly clientConcurrency: number;
}

export interface ClaimLoopHooks {
  /** Called for every claimed task; the slot it occupies is released by the caller when done. */
  onClaimed(token: string, entry: string): void;
  /** Registers the worker again (the claim script refuses an unregistered worker). */
  register(): Promise<void>;
  /** A rate-limited client was taken off the ring until `dueAt` (Redis time, ms). */
  onThrottled(dueAt: number): void;
}

const RETRY_DELAY_MS = 500;
/** Claim calls of one loop under way at once. */
const MAX_CALLS_IN_FLIGHT = 2;

/**
 * The claim loop of one queue. Each round trip is one `claimTasks` call that acknowledges the tasks
 * finished since the last call and claims up to `prefetch` more, round-robin over the clients with
 * pending tasks. Completions that happen in the same turn of the event loop share a call, so under
 * load a task costs less than one round trip. When nothing is pending the loop blocks with BLMOVE on
 * its own connection (no polling) until an enqueue puts a client on the ring; acknowledgements made
 * meanwhile go out on their own.
 */
export class ClaimLoop {
  private readonly stop = new AbortController();
  private readonly outage: OutageReporter;
  private done: Promise<void> | undefined;
  /** Acknowledgements of succeeded tasks waiting for the next call. */
  private readonly acks = new ClaimAcks();
  private blocked = false;
  private flushing: Promise<void> | undefined;
  private wakeLoop: (() => void) | undefined;
  private readonly underWay = new OperationsUnderWay();
  /** Set when the loop ended without being closed (a bug or an unexpected error); the watchdog restarts it. */
  private failure: { error: unknown } | undefined;
  private pauseWake: (() => void) | undefined;
  private pausedWait: Promise<void> | undefined;

  private readonly gateway: ScriptGateway;

  constructor(
    redis: TaskRedis,
    private readonly blocking: RedisConnection,
    private readonly keys: QueueKeys,
    private readonly slots: Slots,
    private readonly options: ClaimLoopOptions,
    private readonly hooks: ClaimLoopHooks,
    logger: TaskLogger,
  ) {
    this.gateway = gatewayOf(redis);
    const watch = watchOf(redis);
    this.outage = new OutageReporter(logger, `claiming from "${keys.queue}"`, () => watch.downSince);
  }

  start(): void {
    this.done ??= this.run().then(
      () => {
        if (!this.stopped) this.failure = { error: new Error('the claim loop returned without being closed') };
      },
      (error: unknown) => {
        this.failure = { error };
      },
    );
  }

  /** The error that ended the loop while it should still run, if that happened. */
  get died(): { error: unknown } | undefined {
    return this.failure;
  }

  /** Starts a loop that died again (its queued acknowledgements are kept). */
  restart(): void {
    if (this.stopped) return;
    this.failure = undefined;
    this.done = undefined;
    this.start();
  }

  /** The queue was resumed (announced by pub/sub): a loop waiting out a pause claims again at once. */
  resume(): void {
    this.pauseWake?.();
  }

  /**
   * Paused: wait for a resume, re-checking after a block timeout in case its announcement was missed.
   * Both calls of the loop may find the queue paused; they share one wait.
   */
  private waitWhilePaused(): Promise<void> {
    this.pausedWait ??= (async () => {
      this.blocked = true; // acknowledgements go out on their own meanwhile
      try {
        if (this.acks.size > 0) void this.flushAcks();
        await new Promise<void>((resolve) => {
          this.pauseWake = resolve;
          void sleep(this.options.blockTimeoutMs, this.stop.signal).then(resolve);
        });
      } finally {
        this.pauseWake = undefined;
        this.pausedWait = undefined;
        this.blocked = false;
      }
    })();
    return this.pausedWait;
  }

  /** The Redis operation furthest past its allowance, if one is: its connection stopped answering. */
  overdue(now = Date.now()): Overdue | undefined {
    return this.underWay.overdue(now);
  }

  /**
   * Queues the acknowledgement of a succeeded task (one without reply or deduplication key). Resolves
   * true once Redis removed it, false when the worker no longer held it (lease lost).
   */
  acknowledge(token: string): Promise<boolean> {
    return new Promise((resolve) => {
      this.acks.add(token, resolve);
      if (this.blocked || this.stopped) {
        void this.flushAcks();
      } else {
        this.wakeLoop?.();
      }
    });
  }

  /** Tokens whose acknowledgement is queued: still held in Redis, so still this worker's. */
  get unacknowledged(): string[] {
    return this.acks.unacknowledged;
  }

  /** Stops claiming and sends the queued acknowledgements; resolves when the loop has left Redis. */
  async close(): Promise<void> {
    this.stop.abort();
    this.slots.wakeAll();
    this.wakeLoop?.();
    // A connection blocked in BLMOVE can only be interrupted by closing it; BLMOVE ring→ring is
    // non-destructive, so cutting it mid-wait loses nothing.
    this.blocking.disconnect();
    await this.done;
    await this.flushAcks();
  }

  private get stopped(): boolean {
    return this.stop.signal.aborted;
  }

  private async run(): Promise<void> {
    const calls = new Set<Promise<number>>();
    let empty = false;
    let woken = false;
    while (!this.stopped) {
      if (empty) {
        // The queue looked empty: let the calls under way land, then block until an enqueue.
        await Promise.all(calls);
        empty = false;
        if (!this.stopped) await this.waitForWork();
        woken = true;
        continue;
      }
      if (calls.size >= MAX_CALLS_IN_FLIGHT) {
        await Promise.race(calls);
        continue;
      }
      await this.work();
      if (this.stopped) {
        break;
      }
      // Let handlers that finish in this same turn join the call; right after a wake-up no handler ran
      // meanwhile, so the claim goes at once (the enqueue -> handler start latency).
      if (woken) woken = false;
      else await nextTurn();
      const wanted = this.slots.take(this.options.prefetch);
      const acks = this.acks.take();
      if (wanted === 0 && acks.length === 0) {
        continue;
      }
      // Up to two calls overlap: while one batch's reply travels, the slots it did not take can be refilled.
      const call: Promise<number> = this.call(wanted, acks).then((claimed) => {
        calls.delete(call);
        if (claimed <= 0 && wanted > 0) empty = true;
        this.wakeLoop?.();
        return claimed;
      });
      calls.add(call);
    }
    await Promise.all(calls);
  }

  /** Resolves when there is something to do: a free slot, or acknowledgements to send. */
  private work(): Promise<void> {
    if (this.acks.size > 0 || this.slots.free > 0) {
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      this.wakeLoop = () => {
        this.wakeLoop = undefined;
        resolve();
      };
      void this.slots.whenFree().then(() => this.wakeLoop?.());
    });
  }

  /** Nothing pending: block until an enqueue puts a client on the ring (or the timeout passes). */
  private async waitForWork(): Promise<void> {
    this.blocked = true;
    try {
      if (this.acks.size > 0) {
        void this.flushAcks();
      }
      const { ring } = this.keys;
      const blocked = this.blocking.blmove(ring, ring, 'LEFT', 'RIGHT', this.options.blockTimeoutMs / 1000);
      // close() cuts the blocking connection, but ioredis leaves a command waiting for a reconnection
      // pending forever when it is cut between two attempts: stopping must not wait for it.
      blocked.catch(() => undefined);
      await this.underWay.track('blocking', this.options.blockTimeoutMs, unlessAborted(blocked, this.stop.signal));
      if (this.stopped) return;
      this.outage.succeeded();
    } catch (error) {
      if (!this.stopped) {
        this.outage.failed(error);
        await sleep(RETRY_DELAY_MS, this.stop.signal);
      }
    } finally {
      this.blocked = false;
    }
  }

  /** One claimTasks call; resolves with the number of tasks claimed, or -1 when Redis failed. */
  private async call(wanted: number, acks: TakenAck[]): Promise<number> {
    let reply: ClaimReply;
    try {
      reply = await this.underWay.track('command', 0, this.gateway.claim(this.keys, {
        workerId: this.options.workerId,
        wanted,
        clientConcurrency: this.options.clientConcurrency,
        tokenPrefix: nextTokenPrefix(),
        acks: acks.map(([token]) => token),
      }));
    } catch (error) {
      this.slots.release(wanted);
      this.acks.failed(acks);
      this.outage.failed(error);
      await sleep(RETRY_DELAY_MS, this.stop.signal);
      return -1;
    }
    this.outage.succeeded();
    const { lost, outcome, throttledUntil } = reply;
    if (throttledUntil !== undefined) {
      // A rate-limited client left the ring: have it put back when its next token is due.
      this.hooks.onThrottled(throttledUntil);
    }
    this.acks.answered(acks, lost);
    switch (outcome.kind) {
      case 'unregistered':
        this.slots.release(wanted);
        await this.hooks.register().catch((error: unknown) => this.outage.failed(error));
        return 0;
      case 'paused':
        // Claim nothing until a resume is announced (or, missing that, for a block timeout).
        this.slots.release(wanted);
        await this.waitWhilePaused();
        return 0;
      case 'claimed': {
        const { pairs } = outcome;
        const count = pairs.length / 2;
        this.slots.release(wanted - count);
        for (let i = 0; i < pairs.length; i += 2) {
          this.hooks.onClaimed(pairs[i], pairs[i + 1]);
        }
        return count;
      }
    }
  }

  /**
   * Sends queued acknowledgements without claiming (the loop is blocked or stopped). Resolves when
   * none is left, or, once stopped, when Redis cannot be reached: those tasks stay in the processing
   * hash, so a restart or a reaper returns them (at-least-once), never loses them.
   */
  flushAcks(): Promise<void> {
    this.flushing ??= (async () => {
      await nextTurn();
      while (this.acks.size > 0) {
        if ((await this.call(0, this.acks.take())) === -1 && this.stopped) {
          return;
        }
      }
    })().finally(() => {
      this.flushing = undefined;
    });
    return this.flushing;
  }
}
