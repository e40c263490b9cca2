import { Redis } from 'ioredis';
import { gatewayOf, type ClaimReply, type ClaimRequest, type ScriptGateway } from '../redis/gateway.js';
import type { QueueKeys } from '../redis/keys.js';
import { defineScripts, type RedisConnection } from '../redis/scripts.js';
import { unlessAborted } from '../support/abortable.js';

/** How an idle wait ended, with the reply of the claim queued behind it. */
export interface WaitEnd {
  /** Set when the blocking read itself failed. */
  readonly error?: unknown;
  /** The queued claim's reply; absent only when the wait could not be made at all. */
  readonly claim?: PromiseSettledResult<ClaimReply>;
}

/**
 * The wait of a claim loop with nothing pending, on the loop's own connection: BLMOVE ring→ring until
 * an enqueue puts a client on the ring (non-destructive, so cutting it mid-wait loses nothing), with a
 * claim pipelined behind it. Redis runs that claim the moment the wait ends, so waking up costs no
 * second round trip.
 */
export class IdleWait {
  private readonly gateway: ScriptGateway;

  constructor(
    private readonly connection: RedisConnection,
    private readonly keys: QueueKeys,
    private readonly timeoutMs: number,
  ) {
    this.gateway = gatewayOf(defineScripts(connection));
  }

  /** Resolves when the wait ends (woken or timed out), or with undefined as soon as `signal` aborts. */
  async wait(claim: ClaimRequest, signal: AbortSignal): Promise<WaitEnd | undefined> {
    const { ring } = this.keys;
    // Both commands leave in one write (one system call, not two: a wake-up each time the queue empties).
    const stream =
      this.connection instanceof Redis && this.connection.status === 'ready' ? this.connection.stream : undefined;
    stream?.cork();
    let blocked: Promise<unknown>;
    let claimed: Promise<ClaimReply>;
    try {
      blocked = this.connection.blmove(ring, ring, 'LEFT', 'RIGHT', this.timeoutMs / 1000);
      claimed = this.gateway.claim(this.keys, claim);
    } finally {
      stream?.uncork();
    }
    // close() cuts the connection, but ioredis leaves a command waiting for a reconnection pending
    // forever when it is cut between two attempts: stopping must not wait for it. A claim that ran but
    // whose reply was cut off leaves its tasks in the processing hash, which the worker's release (or,
    // in an outage, the orphan check) returns to their queue.
    const settled = await unlessAborted(Promise.allSettled([blocked, claimed]), signal);
    if (settled === undefined) return undefined;
    const [wait, reply] = settled;
    const end = { claim: reply };
    // spread-ok: a failed wait only
    return wait.status === 'rejected' ? { ...end, error: wait.reason } : end;
  }

  /** Interrupts a wait: only closing its connection can. */
  cut(): void {
    this.connection.disconnect();
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
