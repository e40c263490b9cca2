import { randomBytes } from 'node:crypto';
import { setImmediate as nextTurn } from 'node:timers/promises';

/** Most acknowledgements sent in one script call (bounded by Lua's unpack() limit). */
export const ACK_CHUNK = 1_000;

/**
 * A taken acknowledgement: the token, who waits to hear whether the worker still held it, and a tracked
 * task's id (its index becomes `completed` in the same call), then a tab and its index's keep when its claim
 * recorded it running (claimTasks-1.lua, ARGV[6..]).
 */
export type TakenAck = readonly [token: string, answer: (held: boolean) => void, tracked?: string];

/**
 * The acknowledgements of succeeded plain tasks that ride on a claim loop's next call: queued here,
 * taken in chunks for a call, and put back when the call fails (nothing is lost, only sent later).
 * Lists, not a Map and a Set of tokens: an entry per task would churn them (see churn-tables.ts).
 */
export class ClaimAcks {
  /** Acknowledgements not yet sent (tokens are unique), oldest first, with who waits for the outcome. */
  private queued: TakenAck[] = [];
  /** The chunks on their way to Redis (a claim loop has at most a few calls under way). */
  private readonly sending: (readonly TakenAck[])[] = [];
  private queuedListener: (() => void) | undefined;

  get size(): number {
    return this.queued.length;
  }

  /** Tokens still held in Redis (queued or being sent): the heartbeat counts them as running. */
  get unacknowledged(): string[] {
    const tokens = this.queued.map(([token]) => token);
    for (const chunk of this.sending) for (const [token] of chunk) tokens.push(token);
    return tokens;
  }

  /** Whether a claim loop takes these acknowledgements (it said so with `ridden`). */
  get rides(): boolean {
    return this.queuedListener !== undefined;
  }

  /** The claim loop that takes these acknowledgements: told of each one queued (to wake, or to send it). */
  ridden(by: () => void): void {
    this.queuedListener = by;
  }

  add(token: string, answer: (held: boolean) => void, tracked?: string): void {
    this.queued.push(tracked === undefined ? [token, answer] : [token, answer, tracked]);
    this.queuedListener?.();
  }

  /** Up to ACK_CHUNK queued acknowledgements, marked as being sent. */
  take(): TakenAck[] {
    let taken: TakenAck[];
    if (this.queued.length <= ACK_CHUNK) {
      taken = this.queued;
      this.queued = [];
    } else {
      taken = this.queued.splice(0, ACK_CHUNK);
    }
    if (taken.length > 0) this.sending.push(taken);
    return taken;
  }

  /** The call answered: each waiter hears whether its token was still held. */
  answered(taken: readonly TakenAck[], lost: readonly string[]): void {
    this.sent(taken);
    const lostTokens = lost.length > 0 ? new Set(lost) : undefined;
    for (const [token, answer] of taken) answer(lostTokens === undefined || !lostTokens.has(token));
  }

  /** The call failed: the acknowledgements go back to the head of the queue for the next call. */
  failed(taken: readonly TakenAck[]): void {
    this.sent(taken);
    this.queued = taken.concat(this.queued);
  }

  private sent(taken: readonly TakenAck[]): void {
    const at = this.sending.indexOf(taken);
    if (at >= 0) this.sending.splice(at, 1);
  }
}

/**
 * Sends a claim loop's queued acknowledgements on their own, without claiming (while the loop is blocked
 * or stopped), one flush at a time. It ends when none is left, or, once stopped, when Redis cannot be
 * reached: those tasks stay in the processing hash, so a restart or a reaper returns them (at-least-once),
 * never loses them.
 */
export class AckFlush {
  private flushing: Promise<void> | undefined;
  private held = false;

  constructor(
    private readonly acks: ClaimAcks,
    /** One acknowledging call (nothing claimed); resolves false when Redis failed it (the acknowledgements went back). */
    private readonly send: (taken: TakenAck[]) => Promise<boolean>,
    private readonly stopped: () => boolean,
  ) {}

  /** The loop is blocked or paused: what is queued, and what comes meanwhile, is sent on its own. */
  hold(): void {
    this.held = true;
    if (this.acks.size > 0) void this.run();
  }

  /** The loop claims again: acknowledgements ride on its calls. */
  release(): void {
    this.held = false;
  }

  get holding(): boolean {
    return this.held;
  }

  run(): Promise<void> {
    this.flushing ??= (async () => {
      await nextTurn();
      while (this.acks.size > 0) {
        if (!(await this.send(this.acks.take())) && this.stopped()) return;
      }
    })().finally(() => {
      this.flushing = undefined;
    });
    return this.flushing;
  }
}

/** Random per process: with the call count, makes every claim call's token prefix unique. */
const TOKEN_NONCE = randomBytes(6).toString('base64url');
let callCount = 0;

/**
 * A fencing-token prefix no other claim call ever gets: this process's random nonce and a call count.
 * With it, a Redis rollback (a failover to a lagging replica, a restart from an older AOF) cannot hand
 * out a token a running task still holds; the script adds its own counter, so the same call sent twice
 * (ioredis resends a command whose reply a reconnection lost) cannot either. Fixed width, so one
 * process's tokens sort in claim order (requeueing restores that order).
 */
export function nextTokenPrefix(): string {
  return `${TOKEN_NONCE}${(++callCount).toString(36).padStart(10, '0')}.`;
}
