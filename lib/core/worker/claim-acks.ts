import { randomBytes } from 'node:crypto';

/** Most acknowledgements sent in one script call (bounded by Lua's unpack() limit). */
export const ACK_CHUNK = 1_000;

/** A taken acknowledgement: the token, and who waits to hear whether the worker still held it. */
export type TakenAck = readonly [token: string, answer: (held: boolean) => void];

/**
 * The acknowledgements of succeeded plain tasks that ride on a claim loop's next call: queued here,
 * taken in chunks for a call, and put back when the call fails (nothing is lost, only sent later).
 */
export class ClaimAcks {
  /** Tokens not yet sent, with who waits for the outcome. */
  private readonly queued = new Map<string, (held: boolean) => void>();
  /** Tokens on their way to Redis. */
  private readonly sending = new Set<string>();

  get size(): number {
    return this.queued.size;
  }

  /** Tokens still held in Redis (queued or being sent): the heartbeat counts them as running. */
  get unacknowledged(): string[] {
    return [...this.queued.keys(), ...this.sending];
  }

  add(token: string, answer: (held: boolean) => void): void {
    this.queued.set(token, answer);
  }

  /** Up to ACK_CHUNK queued acknowledgements, marked as being sent. */
  take(): TakenAck[] {
    const taken: TakenAck[] = [];
    for (const entry of this.queued) {
      taken.push(entry);
      this.queued.delete(entry[0]);
      this.sending.add(entry[0]);
      if (taken.length === ACK_CHUNK) break;
    }
    return taken;
  }

  /** The call answered: each waiter hears whether its token was still held. */
  answered(taken: readonly TakenAck[], lost: readonly string[]): void {
    const lostTokens = new Set(lost);
    for (const [token, answer] of taken) {
      this.sending.delete(token);
      answer(!lostTokens.has(token));
    }
  }

  /** The call failed: the acknowledgements go back to the queue for the next call. */
  failed(taken: readonly TakenAck[]): void {
    for (const [token, answer] of taken) {
      this.sending.delete(token);
      this.queued.set(token, answer);
    }
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
