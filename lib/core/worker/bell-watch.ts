import { forceReconnect } from '../redis/connection.js';
import type { RedisConnection } from '../redis/scripts.js';
import type { Waker } from './wake-signals.js';

/** What the watch needs of the process's blocking connection: to hold it while no loop with work does. */
export interface SlotLender {
  take(owner: object): unknown;
  give(owner: object): void;
}

/** Longest one watch blocks before it starts again (with the loops then waiting): its cost idle is one BLPOP per this. */
export const WATCH_HOLD_MS = 5_000;
/**
 * A watch this long past its hold is taken as hung (a half-open connection): its loops act on their wake
 * messages again, and its connection is cut, so ioredis reconnects and sends the BLPOP again.
 */
const WATCH_OVERDUE_MS = 2_000;
/** After a watch that failed (Redis away), the next one waits this long. */
const WATCH_RETRY_MS = 1_000;
/**
 * After a watch that woke a loop, or a loop with work giving the blocking connection back, the next watch waits
 * this long: for the woken loop to take the connection (it had work) or to wait again (it joins: then at once),
 * and for the loop with work to take it again for its next wait.
 */
const WOKEN_GRACE_MS = 100;

/**
 * The idle loops of a process of several patterns, waiting on their shards' bells together: while no loop
 * with work holds the process's blocking connection, it blocks in one `BLPOP` over the bells of every loop
 * then waiting for its wake message (`BLPOP <bell> <bell> ... <hold>`). A push rings its shard's bell once,
 * and Redis hands the token to one blocked connection: of all idle replicas, one wakes the loop of that shard
 * (`Waker.wake`), which claims. A loop its watch covers leaves its wake messages unheeded (`Waker.cover`), so
 * the other replicas, which hear the same message, do not claim for it. A loop that began waiting after the
 * watch was sent is not covered: its message wakes it, as before. A bell of another type (a stray write)
 * ends watching for the process: its loops wait for their messages from then on. Not on a Cluster (the bells
 * of a process's patterns are in different slots): there each idle loop waits for its message.
 */
export class BellWatch {
  // table-ok: one entry per claim loop of the process waiting now
  private readonly waiting = new Map<string, Waker>();
  private running = false;
  private broken = false;
  private closed = false;
  private retry: NodeJS.Timeout | undefined;
  /** The last watch failed (Redis away): the next waits for its retry. */
  private failedLast = false;

  /** The bells of the watch under way. */
  // table-ok: replaced whole by each watch (a copy of the loops then waiting), never changed in place
  private current: ReadonlyMap<string, Waker> = new Map();
  /** The blocking connection's id on the server it is connected to now (for CLIENT UNBLOCK), once known. */
  private clientId: number | undefined;
  private interrupting = false;
  /** Until when the watch under way covers its loops (see Waker.cover). */
  private coveredUntil = 0;

  /**
   * @param interrupter another connection to the same server (the worker's command connection): it ends a
   *   watch under way (`CLIENT UNBLOCK`) when a loop starts waiting, so the next watch names its bell too
   */
  constructor(
    private readonly connection: RedisConnection,
    private readonly slot: SlotLender,
    private readonly holdMs: number,
    private interrupter?: RedisConnection,
  ) {
    // Reconnected (maybe to another server: a failover): the id it had names nothing of ours any more.
    connection.on('close', () => (this.clientId = undefined));
  }

  /** A loop waits for its wake message: its bell joins the next watch (at once if none is under way). */
  join(bell: string, waker: Waker): void {
    if (this.broken || this.closed) return;
    this.waiting.set(bell, waker);
    if (!this.running) this.soon();
    else if (this.current.get(bell) === waker)
      waker.cover(this.coveredUntil); // back to wait: the watch under way names its bell
    else this.interrupt();
  }

  /** The loop's wait ended: its messages count again. */
  leave(bell: string): void {
    this.waiting.get(bell)?.cover(0);
    this.waiting.delete(bell);
  }

  /**
   * The blocking connection was given back by a loop with work: the loops waiting are watched, unless that loop
   * takes it again first (its next wait, right after its task: it keeps the lowest wake-up latency).
   */
  resume(): void {
    if (this.retry === undefined) this.later(WOKEN_GRACE_MS);
  }

  /** Starts a watch now, unless one is under way (or Redis just refused one: then at its retry). */
  private soon(): void {
    if (this.retry && this.failedLast) return;
    clearTimeout(this.retry);
    this.retry = undefined;
    this.run();
  }

  /** The process closes: no watch from now on; one under way is cut with the connection (true when it was). */
  close(): boolean {
    this.closed = true;
    clearTimeout(this.retry);
    for (const waker of this.waiting.values()) waker.cover(0);
    return this.running;
  }

  /**
   * Ends the watch under way, whose bells do not include a loop that started waiting since: `CLIENT UNBLOCK` of the
   * blocking connection (its `BLPOP` answers as timed out), then the next watch names every loop waiting. Until
   * then the new loop's wake messages wake it, as they would without a watch.
   */
  private interrupt(): void {
    const id = this.clientId;
    if (this.interrupting || id === undefined || this.interrupter === undefined) return;
    this.interrupting = true;
    this.interrupter.client('UNBLOCK', id).catch((error: unknown) => {
      // An ACL without CLIENT UNBLOCK (a rule written before it was needed): a new loop's messages wake it until
      // the watch's hold ends, as they would without a watch; not asked again.
      if (/NOPERM/.test((error as Error | undefined)?.message ?? '')) this.interrupter = undefined;
    });
  }

  /** The next watch starts after `ms`, or sooner on a join or a connection given back. */
  private later(ms: number): void {
    clearTimeout(this.retry);
    if (this.closed || this.broken) return;
    this.retry = setTimeout(() => {
      this.retry = undefined;
      this.run();
    }, ms);
    this.retry.unref();
  }

  private run(): void {
    if (this.running || this.broken || this.closed || this.waiting.size === 0) return;
    if (this.slot.take(this) === undefined) return;
    this.running = true;
    const watched = new Map(this.waiting);
    this.coveredUntil = Date.now() + this.holdMs + WATCH_OVERDUE_MS;
    for (const waker of watched.values()) waker.cover(this.coveredUntil);
    this.current = watched;
    this.interrupting = false;
    let failed = false;
    let fired = false;
    const overdue = setTimeout(() => {
      // Redis may still hold the BLPOP of the silent socket, and have given it a push's token: each loop it covered
      // claims once.
      for (const waker of watched.values()) waker.wake();
      forceReconnect(this.connection);
    }, this.holdMs + WATCH_OVERDUE_MS);
    overdue.unref();
    // Its id first, in the same write: answered before the BLPOP blocks, so a join may end the BLPOP.
    this.connection.client('ID').then(
      (id) => {
        this.clientId = Number(id);
        // A loop began waiting before the id came: its interrupt was waiting for it.
        if (this.running && this.current === watched && [...this.waiting.keys()].some((bell) => !watched.has(bell)))
          this.interrupt();
      },
      () => undefined,
    );
    this.connection
      .blpop(...watched.keys(), this.holdMs / 1000)
      .then(
        (reply) => {
          // The token of a push is this process's: the loop of its shard claims (awake, it leaves the watch).
          const bell = reply?.[0];
          if (bell === undefined) return;
          fired = true;
          watched.get(bell)?.wake();
        },
        (error: unknown) => {
          failed = true;
          // A bell of another type: its shard's loop (and the others) wait for their messages from now on.
          if (/^WRONGTYPE/.test((error as Error | undefined)?.message ?? '')) this.broken = true;
          // Messages left unheeded while it was under way may have announced work: each loop it covered claims once.
          for (const waker of watched.values()) waker.wake();
        },
      )
      .finally(() => {
        clearTimeout(overdue);
        for (const [bell, waker] of watched) if (this.waiting.get(bell) === waker) waker.cover(0);
        this.running = false;
        this.failedLast = failed;
        this.slot.give(this);
        if (failed) this.later(WATCH_RETRY_MS);
        else if (fired) this.later(WOKEN_GRACE_MS);
        else this.run();
      });
  }
}
