import type { ClaimReply, ClaimRequest, ScriptGateway } from '../redis/gateway.js';
import type { QueueKeys } from '../redis/keys.js';
import { unlessAborted } from '../support/abortable.js';
import type { Waker } from './wake-signals.js';

/** How an idle wait ended, with the reply of the claim made at its end. */
export interface WaitEnd {
  /** Set when the wait itself failed. */
  readonly error?: unknown;
  /** The claim's reply; absent only when the wait could not be made at all. */
  readonly claim?: PromiseSettledResult<ClaimReply>;
}

/** At most this share of the backstop is taken off at random, so idle loops' backstop claims spread out. */
const BACKSTOP_JITTER = 0.2;

/**
 * The wait of a claim loop with nothing pending: no connection of its own and no command while it waits.
 * It ends when the shard's wake message comes (a script put a client on its empty ring; see
 * WakeSignals), or after the backstop; then it claims, on the worker's command connection.
 */
export class IdleWait {
  constructor(
    private readonly waker: Waker,
    private readonly gateway: Pick<ScriptGateway, 'claim'>,
    private readonly keys: QueueKeys,
    private readonly backstopMs: number,
  ) {}

  /** Resolves when the wait ends (woken or the backstop passed) with the claim's reply, or with undefined as soon as `signal` aborts. */
  async wait(claim: ClaimRequest, signal: AbortSignal): Promise<WaitEnd | undefined> {
    await this.waker.next(this.backstopMs * (1 - BACKSTOP_JITTER * Math.random()), signal);
    if (signal.aborted) return undefined;
    // Closing does not wait for a claim that waits for Redis (an outage): what it took, if it ran, is
    // in the processing hash, which the worker's release (or the orphan check) returns to the queue.
    const settled = await unlessAborted(Promise.allSettled([this.gateway.claim(this.keys, claim)]), signal);
    return settled && { claim: settled[0] };
  }

  /** Interrupts a wait (the loop is closing). */
  cut(): void {
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
