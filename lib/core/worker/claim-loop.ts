import { setImmediate as nextTurn } from 'node:timers/promises';
import { type ClaimReply, type ClaimRequest, type ScriptGateway } from '../redis/gateway.js';
import type { QueueKeys } from '../redis/keys.js';
import { OutageReporter, sleep, type TaskLogger } from '../support/logger.js';
import { claimedCount, keepFirst, type IdleWait, type WaitEnd } from './idle-wait.js';
import { PauseWait } from './pause-wait.js';
import { AckFlush, nextTokenPrefix, type ClaimAcks, type TakenAck } from './claim-acks.js';
import { OperationsUnderWay, type LoopConnection, type Overdue } from './overdue.js';
import type { PatternSlots } from './slots.js';
import { heldLeaseMs } from './worker-types.js';
import { LoopLife } from './loop-life.js';
import { AcksAhead } from './acks-ahead.js';
import { dispatchClaimed } from './claim-dispatch.js';
import { SlotSet } from '../support/churn-tables.js';

export type { LoopConnection, Overdue } from './overdue.js';

export interface ClaimLoopOptions {
  readonly workerId: string;
  readonly prefetch: number;
  readonly blockTimeoutMs: number;
  /** Most tasks of one client in flight at once across all workers of the queue (0: no cap). */
  readonly clientConcurrency: number;
  /** The worker's lease and heartbeat (see heldLeaseMs: what a claim cuts an idle lease to). */
  readonly leaseMs: number;
  readonly heartbeatIntervalMs: number;
}

export interface ClaimLoopHooks {
  /** Called for every claimed task; the slot it occupies is released by the caller when done. */
  /**
   * `recorded`: the claim recorded the task running (tracked): it starts without a startTasks call; `keep`: then its
   * index's keep, sent back with its success.
   */
  onClaimed(token: string, entry: string, recorded: boolean, keep?: string): void;
  /** Registers the worker again (the claim script refuses an unregistered worker). */
  register(): Promise<void>;
  /** A rate-limited client was taken off the ring until `dueAt` (Redis time, ms). */
  onThrottled(dueAt: number): void;
  /**
   * Tasks claimed with no free slot to run them (token, entry, token, entry, ...): return them to their
   * queue without counting an attempt, ahead of any later claim of this loop.
   */
  giveBack(pairs: readonly string[]): void;
}

/**
 * What a claim loop reaches Redis with (the worker makes them; a unit test scripts them): the claim
 * script, the loop's idle wait on its own blocking connection, and since when the connection is down.
 */
export interface ClaimLoopRedis {
  readonly gateway: Pick<ScriptGateway, 'claim'>;
  readonly idle: Pick<IdleWait, 'wait' | 'cut' | 'connection'>;
  /** When the loop's connection went down (undefined while it is up). */
  readonly downSince: () => number | undefined;
}

const RETRY_DELAY_MS = 500;
/** Longest a closing loop waits for the answer to acknowledgements sent ahead of its idle wait. */
const AHEAD_ANSWER_MS = 1_000;

/** What a claim call came to: tasks claimed (-1: Redis failed), and whether it left no client waiting. */
interface Claimed {
  readonly count: number;
  readonly drained: boolean;
}
const FAILED: Claimed = { count: -1, drained: false };
const NONE: Claimed = { count: 0, drained: false };
/** Claim calls of one loop under way at once. */
const MAX_CALLS_IN_FLIGHT = 2;

/**
 * The claim loop of one queue. Each round trip is one `claimTasks` call that acknowledges the tasks
 * finished since the last call and claims up to `prefetch` more, round-robin over the clients with
 * pending tasks. Completions that happen in the same turn of the event loop share a call, so under
 * load a task costs less than one round trip. When nothing is pending the loop waits, sending nothing,
 * until the shard's wake message says a client went onto its empty ring (heard on the process's one
 * subscriber connection, so a process holds the same connections for 1 pattern or 100), or its backstop
 * passes; then it claims. Acknowledgements queued when it begins to wait go in the wait's own write, ahead of it;
 * those made while it waits go out on their own.
 */
export class ClaimLoop {
  private readonly stop = new AbortController();
  private readonly outage: OutageReporter;
  private readonly life: LoopLife;
  private readonly flush: AckFlush;
  private wakeLoop: (() => void) | undefined;
  private readonly underWay = new OperationsUnderWay();
  /** Acknowledgements sent ahead of an idle wait (see waitForWork). */
  private readonly ahead: AcksAhead;
  private readonly pause: PauseWait;

  private readonly gateway: ClaimLoopRedis['gateway'];
  private readonly idle: ClaimLoopRedis['idle'];

  constructor(
    redis: ClaimLoopRedis,
    private readonly keys: QueueKeys,
    /** Acknowledgements of succeeded tasks waiting for the next call (the completer queues them). */
    private readonly acks: ClaimAcks,
    private readonly slots: PatternSlots,
    private readonly options: ClaimLoopOptions,
    private readonly hooks: ClaimLoopHooks,
    logger: TaskLogger,
  ) {
    this.gateway = redis.gateway;
    this.idle = redis.idle;
    this.life = new LoopLife('claim loop', this.run.bind(this), () => this.stopped);
    this.ahead = aheadOf(keys, options, this.settle.bind(this, 0), this.ackQueued.bind(this));
    this.pause = new PauseWait(options.blockTimeoutMs, this.stop.signal);
    this.outage = new OutageReporter(logger, `claiming from "${keys.queue}"`, redis.downSince);
    acks.ridden(this.ackQueued.bind(this));
    this.flush = new AckFlush(
      acks,
      async (taken) => (await this.call(0, taken)) !== FAILED,
      () => this.stopped,
    );
  }

  start(): void {
    this.life.start();
  }

  /** The error that ended the loop while it should still run, if that happened. */
  get died(): { error: unknown } | undefined {
    return this.life.died;
  }

  /** Starts a loop that died again (its queued acknowledgements are kept). */
  restart(): void {
    this.life.restart();
  }

  /** The queue was resumed (announced by pub/sub): a loop waiting out a pause claims again at once. */
  resume(): void {
    this.pause.resume();
  }

  /** The Redis operation furthest past its allowance, if one is: its connection stopped answering. */
  overdue(now = Date.now(), readySince?: (connection: LoopConnection) => number | undefined): Overdue | undefined {
    return this.underWay.overdue(now, readySince);
  }

  /**
   * An acknowledgement was queued (the completer rode a success on this loop): the next call takes it, or,
   * while the loop is blocked or stopped, a call of its own.
   */
  private ackQueued(): void {
    if (this.flush.holding || this.stopped) void this.flushAcks();
    else this.wakeLoop?.();
  }

  /** Stops claiming and sends the queued acknowledgements; resolves when the loop has left Redis. */
  async close(): Promise<void> {
    this.stop.abort();
    this.slots.wakeAll();
    this.wakeLoop?.();
    await this.ahead.settled(AHEAD_ANSWER_MS);
    this.idle.cut();
    await this.life.ended();
    await this.flushAcks();
  }

  private get stopped(): boolean {
    return this.stop.signal.aborted;
  }

  private async run(): Promise<void> {
    const calls = new SlotSet<Promise<number>>(); // one per claim call: no Set (see SlotSet)
    let empty = false;
    let woken = false;
    while (!this.stopped) {
      if (empty) {
        // The queue looked empty: let the calls under way land, then wait (unless one of them found more).
        await Promise.all(calls.values());
        if (!empty) continue;
        // Woken with tasks claimed and more waiting: go on claiming. The claim after the wait found none
        // (a timeout, or another worker took what woke it), or took the last: block again.
        empty = !this.stopped && (await this.waitForWork());
        woken = true;
        continue;
      }
      if (calls.size >= MAX_CALLS_IN_FLIGHT) {
        await Promise.race(calls.values());
        continue;
      }
      await this.work();
      if (this.stopped) break;
      // Let handlers that finish in this same turn join the call. Right after a wake-up none ran meanwhile, so
      // the claim goes at once if a slot is free; with none (concurrency 1: the woken task runs) it waits the
      // turn too, so that run's acknowledgement and slot go in one call (not an acknowledgement alone, then a claim).
      if (!woken || this.slots.free === 0) await nextTurn();
      woken = false;
      const wanted = this.slots.take(this.options.prefetch);
      const acks = this.acks.take();
      if (wanted === 0 && acks.length === 0) continue;
      // Up to two calls overlap: while one batch's reply travels, the slots it did not take can be refilled.
      const call: Promise<number> = this.call(wanted, acks).then(({ count, drained }) => {
        calls.delete(slot, call);
        // The latest claim decides (calls run in the order sent): one that left no client waiting means wait
        // for a wake-up; one that left some (no wake message comes for a ring that was not empty), or failed,
        // met a pause or an unregistered worker (it slept, waited or registered already), claiming on.
        if (wanted > 0) empty = drained;
        this.wakeLoop?.();
        return count;
      });
      const slot = calls.add(call);
    }
    await Promise.all(calls.values());
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

  /**
   * Nothing pending: wait until the shard's wake message (a client went onto its empty ring) or the
   * backstop, then claim at once. Resolves true when that claim found nothing or took the last waiting task (wait
   * again); false when more are waiting, or it did not run (a failure, stopped), so the
   * loop goes on as usual.
   *
   * A waiting loop holds no slots (another queue's loop may need them meanwhile): its claim asks for as
   * many tasks as slots were free when the wait began, and takes the slots when its reply comes. If
   * other loops took them meanwhile, the tasks it cannot start go straight back to the heads of their
   * clients' lists, uncounted.
   */
  private async waitForWork(): Promise<boolean> {
    // Let the handlers just dispatched start first: their start is the latency a task sees, and re-arming
    // the wait (two commands built and written) would otherwise run ahead of their promise chains.
    await nextTurn();
    // Closed during that turn: its wakeAll() has passed, so a wait for a slot would outlast the handlers.
    if (this.stopped) return false;
    this.flush.hold(); // acknowledgements go out on their own meanwhile (nothing to claim them with)
    // Every slot taken: wait for one (no demand: the queue looked empty), so the woken claim can take one.
    while (this.slots.free === 0 && !this.stopped) await this.slots.whenFree(false);
    if (this.stopped) {
      this.flush.release();
      return false;
    }
    const wanted = Math.min(this.options.prefetch, this.slots.free);
    this.slots.notWaiting(); // waiting on Redis, not for a slot: none kept for it meanwhile
    // The acknowledgements queued by now (the run that just ended) go in the wait's own write, ahead of it.
    const first = this.ahead.of(this.acks.take());
    const waiting = this.idle.wait(claimRequest(this.options, wanted, []), this.stop.signal, first);
    const end = await this.underWay
      .track(this.idle.connection, this.options.blockTimeoutMs, waiting)
      .catch((error: unknown): WaitEnd => ({ error }));
    this.flush.release();
    if (end === undefined || this.stopped) return false;
    if (end.error === undefined) this.outage.succeeded();
    else this.outage.failed(end.error);
    if (end.claim === undefined) {
      await sleep(RETRY_DELAY_MS, this.stop.signal); // the wait itself failed
      return false;
    }
    const count = claimedCount(end.claim);
    const taken = this.slots.take(count);
    const { kept, extra } = keepFirst(end.claim, taken);
    if (extra.length > 0) this.hooks.giveBack(extra);
    const claimed = await this.settle(taken, [], kept);
    return claimed.drained;
  }

  /** One claimTasks call: how many tasks it claimed (-1: Redis failed), and whether it drained the queue. */
  private async call(wanted: number, acks: TakenAck[]): Promise<Claimed> {
    const [replied] = await Promise.allSettled([
      this.underWay.track('command', 0, this.gateway.claim(this.keys, claimRequest(this.options, wanted, acks))),
    ]);
    return this.settle(wanted, acks, replied);
  }

  /** Acts on a claim's reply (or failure): the claimed tasks dispatched, the slots it did not fill released. */
  private async settle(wanted: number, acks: TakenAck[], replied: PromiseSettledResult<ClaimReply>): Promise<Claimed> {
    if (replied.status === 'rejected') {
      this.slots.release(wanted);
      this.acks.failed(acks);
      this.outage.failed(replied.reason);
      await sleep(RETRY_DELAY_MS, this.stop.signal);
      return FAILED;
    }
    const reply = replied.value;
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
        return NONE;
      case 'paused':
        // Claim nothing until a resume is announced (or, missing that, for a block timeout).
        this.slots.release(wanted);
        this.flush.hold(); // acknowledgements go out on their own meanwhile
        await this.pause.wait();
        this.flush.release();
        return NONE;
      case 'claimed': {
        const { pairs } = outcome;
        const count = pairs.length / 2;
        // Closing: start nothing (shutdown counted its runs already); the tasks stay held, and shutdown returns them uncounted.
        const started = this.stopped ? 0 : count;
        this.slots.release(wanted - started);
        dispatchClaimed(pairs, reply.started, reply.keeps ?? [], started, this.hooks.onClaimed);
        return { count, drained: reply.drained };
      }
    }
  }

  /** Sends queued acknowledgements without claiming (the loop is blocked or stopped): see AckFlush. */
  flushAcks(): Promise<void> {
    return this.flush.run();
  }
}

/** A loop's acknowledgements sent ahead of its idle wait: a claimTasks call that claims nothing, then `settle`d. */
function aheadOf(
  keys: QueueKeys,
  options: ClaimLoopOptions,
  settle: (taken: TakenAck[], replied: PromiseSettledResult<ClaimReply>) => Promise<Claimed>,
  resend: () => void,
): AcksAhead {
  return new AcksAhead(
    (gateway, taken) => gateway.claim(keys, claimRequest(options, 0, taken)),
    async (taken, replied) => (await settle(taken, replied)) !== FAILED,
    resend,
  );
}

/** A claimTasks call's arguments, its fencing-token prefix new. */
function claimRequest(options: ClaimLoopOptions, wanted: number, acks: readonly TakenAck[]): ClaimRequest {
  return {
    workerId: options.workerId,
    wanted,
    clientConcurrency: options.clientConcurrency,
    tokenPrefix: nextTokenPrefix(),
    leaseMs: heldLeaseMs(options),
    // A tracked task's id after a tab (tokens have none): claimTasks completes its index.
    acks: acks.map(([token, , tracked]) => (tracked === undefined ? token : `${token}\t${tracked}`)),
  };
}
