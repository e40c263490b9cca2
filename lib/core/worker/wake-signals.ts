/**
 * How a worker process hears that an idle queue shard has work, on one connection whatever its number of
 * patterns: a script that puts a client on an empty ring publishes on the shard's `<base>:wake` channel
 * (include/guard.lua's wakeWorkers), the process's one subscriber connection hears it, and the claim
 * loop of that shard claims. A message can be missed (the subscriber was reconnecting, a failover moved
 * it), so every loop is woken when the subscriber is back, and a loop that heard nothing claims anyway
 * after its backstop (`blockTimeoutMs`).
 */
export class WakeSignals {
  // table-ok: one entry per queue shard of the process
  private readonly wakers = new Map<string, Waker>();
  /** How many of the process's loops wait for their message now (shared by its wakers). */
  private readonly idle = { loops: 0 };
  /** Wake channels the process is not subscribed to (see leaveUnheard). */
  // table-ok: at most the process's one shard
  private readonly unheard = new Set<string>();
  private subscribe: ((channel: string) => Promise<unknown>) | undefined;

  /** The wake-up of the shard whose channel this is (one per channel). */
  waker(channel: string): Waker {
    let waker = this.wakers.get(channel);
    if (!waker) {
      waker = new Waker(this.idle, () => this.listen(channel));
      this.wakers.set(channel, waker);
    }
    return waker;
  }

  /**
   * Wake channels left unsubscribed: a process's lone claim loop waits on its shard's bell, which a push
   * rings for one process, so a message per push would only wake every such process for nothing. Its loop
   * subscribes (`subscribe`) the first time it has to wait for messages instead (its bell holds another type).
   */
  leaveUnheard(channels: readonly string[], subscribe: (channel: string) => Promise<unknown>): void {
    for (const channel of channels) this.unheard.add(channel);
    this.subscribe = subscribe;
  }

  /** A loop waits for its messages: its channel is subscribed to (then it claims once: one may have been missed). */
  private listen(channel: string): void {
    const subscribe = this.subscribe;
    if (!subscribe || !this.unheard.delete(channel)) return;
    subscribe(channel).then(
      () => this.wakers.get(channel)?.wake(),
      () => this.unheard.add(channel), // the subscriber is down: its next wait asks again (its backstop claims meanwhile)
    );
  }

  /** A message came on `channel`: true when it is a wake channel of this process. */
  heard(channel: string): boolean {
    const waker = this.wakers.get(channel);
    waker?.heard();
    return waker !== undefined;
  }

  /** Every loop claims once (the subscriber reconnected: what it missed meanwhile is found so). */
  wakeAll(): void {
    for (const waker of this.wakers.values()) waker.wake();
  }
}

/** One queue shard's wake-up: a flag set by each message and cleared by each claim sent after it. */
export class Waker {
  private pending = false;
  private coveredUntil = 0;
  private end: (() => void) | undefined;

  constructor(
    private readonly idle: { loops: number } = { loops: 0 },
    /** Subscribes to this shard's channel if the process left it unheard (see WakeSignals.leaveUnheard). */
    readonly listen: () => void = () => undefined,
  ) {}

  /**
   * How many loops of the process wait for their message now, this one's included if it does: a loop's
   * backstop grows with them, so an idle process makes one backstop claim per backstop interval whatever
   * its number of patterns.
   */
  get idleLoops(): number {
    return this.idle.loops;
  }

  /** A claim is on its way: it finds what any message heard so far announced. */
  claiming(): void {
    this.pending = false;
  }

  wake(): void {
    this.pending = true;
    this.end?.();
  }

  /**
   * Its shard's wake message: wakes the loop, unless a `BLPOP` of this process on its bell covers it now (see
   * `cover`). Then the push's token wakes one process, not every one that heard the message.
   */
  heard(): void {
    if (Date.now() < this.coveredUntil) return;
    this.wake();
  }

  /**
   * Until `until` (Redis-independent ms; 0: no more), the loop waits in a `BLPOP` of its shard's bell
   * (BellWatch, or its own blocked wait), which takes its push's token: its wake messages are left unheeded.
   * The deadline is past the `BLPOP`'s own, so a connection that hung gives the messages back their say.
   */
  cover(until: number): void {
    this.coveredUntil = until;
  }

  /**
   * Resolves at the next message (at once if one came since the last claim was sent), after
   * `timeoutMs`, when `signal` aborts, or when the wait is cut.
   */
  next(timeoutMs: number, signal: AbortSignal): Promise<void> {
    if (this.pending || signal.aborted) return Promise.resolve();
    this.idle.loops++;
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        this.end = undefined;
        this.idle.loops--;
        resolve();
      };
      const timer = setTimeout(done, timeoutMs);
      signal.addEventListener('abort', done, { once: true });
      this.end = done;
    });
  }

  /** Ends a wait under way (the loop is closing). */
  cut(): void {
    this.end?.();
  }
}
