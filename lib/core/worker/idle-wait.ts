import { Cluster, Redis } from 'ioredis';
import { gatewayOf, type ClaimReply, type ClaimRequest, type ScriptGateway } from '../redis/gateway.js';
import type { QueueKeys } from '../redis/keys.js';
import { defineScripts, type RedisConnection } from '../redis/scripts.js';
import { unlessAborted } from '../support/abortable.js';
import type { LoopConnection } from './overdue.js';
import type { Waker } from './wake-signals.js';
import { BellWatch, WATCH_HOLD_MS } from './bell-watch.js';

/** How an idle wait ended, with the reply of the claim made at its end. */
export interface WaitEnd {
  /** Set when the blocking read itself failed. */
  readonly error?: unknown;
  /** The claim's reply; absent only when the wait could not be made at all. */
  readonly claim?: PromiseSettledResult<ClaimReply>;
}

/**
 * Whether a process of `shards` claim loops (one per queue shard) has one loop alone: it always waits on its
 * shard's bell (see BlockingSlot), so it needs no wake message unless its bell is broken.
 */
export function waitsOnItsBell(shards: number): boolean {
  return shards === 1;
}

/** At most this share of the backstop is taken off at random, so idle loops' backstop claims spread out. */
const BACKSTOP_JITTER = 0.2;
/** Longest a loop keeps the blocking connection while nothing comes: then it is another's to take. */
const BLOCKING_HOLD_MS = 1_000;
/** A blocked wait this long past its hold is taken as hung: the loop's wake messages count again. */
const BLOCKED_COVER_MARGIN_MS = 2_000;

/**
 * The worker process's one blocking connection, lent to one idle claim loop at a time: that loop waits
 * in `BLPOP <base>:bell` with its claim pipelined behind it, so Redis runs the claim the moment a token on
 * the bell ends the wait (no message to hear, no second round trip: the lowest wake-up latency), and each
 * token wakes one process, not every idle one. The other idle loops wait for their wake message. A process
 * holds this one connection whatever its number of patterns.
 * It goes to the loops that have work: a loop takes it only if its last wait brought tasks (a loop's
 * first wait does not), and gives it up after a second without any (then it waits for its message, and
 * another busy loop takes it).
 */
export class BlockingSlot {
  private holder: object | undefined;
  private readonly gateway: ScriptGateway;
  /** The idle loops' shared wait on their bells while no loop with work holds the connection (not alone, not a Cluster). */
  readonly watch: BellWatch | undefined;

  /**
   * @param alone the process has one claim loop: it always takes the connection (no other loop needs it),
   *   so it waits on its bell and is woken only when a token is its to take.
   * @param watch how long one watch of the idle loops' bells blocks, and the connection that ends one early (see
   *   BellWatch: the worker's command connection)
   */
  constructor(
    readonly connection: RedisConnection,
    readonly alone = false,
    watch: { readonly holdMs?: number; readonly interrupter?: RedisConnection } = {},
  ) {
    this.gateway = gatewayOf(defineScripts(connection));
    this.watch =
      alone || connection instanceof Cluster
        ? undefined
        : new BellWatch(connection, this, watch.holdMs ?? WATCH_HOLD_MS, watch.interrupter);
  }

  /** Lends the connection to `owner` if no loop holds it: its claim gateway, or undefined. */
  take(owner: object): ScriptGateway | undefined {
    if (this.holder !== undefined) return undefined;
    this.holder = owner;
    return this.gateway;
  }

  give(owner: object): void {
    if (this.holder !== owner) return;
    this.holder = undefined;
    // A loop with work is done with it: the idle loops' bells are watched on it (the watch starts its next itself).
    if (owner !== this.watch) this.watch?.resume();
  }

  /** The process closes: no more watches; one under way is cut with the connection. */
  close(): void {
    if (this.watch?.close()) this.connection.disconnect();
  }

  holds(owner: object): boolean {
    return this.holder === owner;
  }
}

/**
 * The wait of a claim loop with nothing pending. With the process's blocking connection free, it blocks
 * on it (see BlockingSlot); otherwise it sends nothing while it waits: it ends when the shard's wake
 * message comes (a script put a client on its empty ring; see WakeSignals), or after the backstop, then
 * claims on the worker's command connection. The backstop is `backstopMs` times the number of the process's
 * loops waiting, so an idle process of many patterns claims on its own once per `backstopMs`, not once per
 * pattern.
 */
export class IdleWait {
  /** The connection the wait under way (or the last) holds: the watchdog's to reconnect if it hangs. */
  private held: LoopConnection = 'command';
  /**
   * No wait of this loop brought a task yet, or the last did not: its next leaves the blocking connection
   * to loops with work.
   */
  private cold = true;
  /** The shard's bell holds another type (a stray write): this loop waits for its message instead. */
  private bellBroken = false;

  constructor(
    private readonly waker: Waker,
    private readonly gateway: Pick<ScriptGateway, 'claim'>,
    private readonly keys: QueueKeys,
    private readonly backstopMs: number,
    private readonly blocking: BlockingSlot,
  ) {}

  get connection(): LoopConnection {
    return this.held;
  }

  /**
   * Resolves when the wait ends (woken or timed out) with the claim's reply, or with undefined as soon as `signal`
   * aborts. `first`, if given, makes a call on the connection the wait uses, in the same write as it and ahead of it
   * (the loop's acknowledgements: no write of their own).
   */
  async wait(
    claim: ClaimRequest,
    signal: AbortSignal,
    first?: (gateway: Pick<ScriptGateway, 'claim'>) => void,
  ): Promise<WaitEnd | undefined> {
    const end = await this.waitOnce(claim, signal, first);
    this.cold = end?.claim !== undefined && claimedCount(end.claim) === 0;
    return end;
  }

  private async waitOnce(
    claim: ClaimRequest,
    signal: AbortSignal,
    first?: (gateway: Pick<ScriptGateway, 'claim'>) => void,
  ): Promise<WaitEnd | undefined> {
    const lent = (this.cold && !this.blocking.alone) || this.bellBroken ? undefined : this.blocking.take(this);
    this.held = lent ? 'blocking' : 'command';
    if (lent) {
      try {
        return await this.blocked(lent, claim, signal, first);
      } finally {
        this.blocking.give(this);
      }
    }
    first?.(this.gateway);
    // The backstop (for a message lost) is shared by the process's idle loops: each waits it once per loop
    // waiting, so the process claims on its own about once per backstop whatever its number of patterns.
    const backstopMs = this.backstopMs * (this.waker.idleLoops + 1);
    // Its messages are what wake it: a process that left its channel unheard (a lone loop) subscribes now.
    this.waker.listen();
    // Or its bell, watched with the other idle loops' on the blocking connection when it is free (BellWatch).
    const watch = this.bellBroken ? undefined : this.blocking.watch;
    watch?.join(this.keys.bell, this.waker);
    try {
      await this.waker.next(backstopMs * (1 - BACKSTOP_JITTER * Math.random()), signal);
    } finally {
      watch?.leave(this.keys.bell);
    }
    if (signal.aborted) return undefined;
    // Closing does not wait for a claim that waits for Redis (an outage): what it took, if it ran, is
    // in the processing hash, which the worker's release (or the orphan check) returns to the queue.
    const settled = await unlessAborted(Promise.allSettled([this.gateway.claim(this.keys, claim)]), signal);
    return settled && { claim: settled[0] };
  }

  /**
   * BLPOP of the shard's bell with the claim pipelined behind it: each token wakes one blocked process, and
   * cutting the wait loses nothing that matters (a token taken and not acted on is a claim's worth: the
   * backstop claims, and the next push rings again).
   */
  private async blocked(
    gateway: ScriptGateway,
    claim: ClaimRequest,
    signal: AbortSignal,
    first?: (gateway: Pick<ScriptGateway, 'claim'>) => void,
  ): Promise<WaitEnd | undefined> {
    const { connection } = this.blocking;
    const { bell } = this.keys;
    // The commands leave in one write (one system call, not two or three: a wake-up each time the queue empties).
    const stream = connection instanceof Redis && connection.status === 'ready' ? connection.stream : undefined;
    stream?.cork();
    let blocked: Promise<unknown>;
    let claimed: Promise<ClaimReply>;
    // A loop alone in its process keeps the connection (nobody else needs it): its backstop is the hold.
    const holdMs = this.blocking.alone ? this.backstopMs : Math.min(this.backstopMs, BLOCKING_HOLD_MS);
    // Blocked on its bell, the loop leaves its wake messages unheeded: the push's token wakes one process.
    this.waker.cover(Date.now() + holdMs + BLOCKED_COVER_MARGIN_MS);
    try {
      first?.(gateway); // answered at once: Redis runs it before the blocking read
      blocked = connection.blpop(bell, holdMs / 1000);
      this.waker.claiming(); // the claim behind the wait answers what any wake message announced
      claimed = gateway.claim(this.keys, claim);
    } finally {
      stream?.uncork();
    }
    // close() cuts the connection, but ioredis leaves a command waiting for a reconnection pending
    // forever when it is cut between two attempts: stopping must not wait for it. A claim that ran but
    // whose reply was cut off leaves its tasks in the processing hash, which the worker's release (or,
    // in an outage, the orphan check) returns to their queue.
    const settled = await unlessAborted(Promise.allSettled([blocked, claimed]), signal);
    this.waker.cover(0);
    if (settled === undefined) return undefined;
    const [wait, reply] = settled;
    const end = { claim: reply };
    if (wait.status === 'rejected' && /^WRONGTYPE/.test((wait.reason as Error | undefined)?.message ?? '')) {
      this.bellBroken = true;
    }
    // spread-ok: a failed wait only
    return wait.status === 'rejected' ? { ...end, error: wait.reason } : end;
  }

  /** Interrupts a wait (the loop is closing): a blocked one only by cutting its connection. */
  cut(): void {
    if (this.blocking.holds(this)) this.blocking.connection.disconnect();
    this.waker.cut();
  }
}

/**
 * Splits a claim's reply at `kept` tasks (the slots free when it came): the tasks past that point (token,
 * entry, token, entry, ...) are returned to their queue, the rest run.
 */
export function keepFirst(
  reply: PromiseSettledResult<ClaimReply>,
  kept: number,
): { kept: PromiseSettledResult<ClaimReply>; extra: readonly string[] } {
  if (reply.status === 'rejected' || reply.value.outcome.kind !== 'claimed') return { kept: reply, extra: [] };
  const { pairs } = reply.value.outcome;
  const extra = pairs.slice(2 * kept);
  if (extra.length === 0) return { kept: reply, extra };
  // The extra tasks go back to their lists (and their clients onto the ring): not drained any more.
  return {
    kept: {
      status: 'fulfilled',
      // spread-ok: only when a claim brought more tasks than slots were free
      value: { ...reply.value, outcome: { kind: 'claimed', pairs: pairs.slice(0, 2 * kept) }, drained: false },
    },
    extra,
  };
}

/** How many tasks a claim's reply holds. */
export function claimedCount(reply: PromiseSettledResult<ClaimReply>): number {
  return reply.status === 'fulfilled' && reply.value.outcome.kind === 'claimed'
    ? reply.value.outcome.pairs.length / 2
    : 0;
}
