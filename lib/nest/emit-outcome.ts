import type { Subscriber } from 'rxjs';
import type { EnqueueAnswer, EnqueueReceipt } from '../core/producer/producer.js';

/**
 * What one `emit()` came to, for every subscriber of its Observable, early or late: like a settled
 * promise, without a promise per emit (each would add a turn of the microtask queue between Redis's
 * answer and the caller). Subscribers that come before the answer hear it when it comes; later ones,
 * as they subscribe.
 */
export class EmitOutcome<T = EnqueueReceipt> implements EnqueueAnswer {
  private outcome: { readonly receipt: T } | { readonly error: unknown } | undefined;
  private waiting: Subscriber<T>[] | undefined;

  written(receipt: EnqueueReceipt): void {
    this.settle({ receipt: receipt as T });
  }

  failed(error: unknown): void {
    this.settle({ error });
  }

  /** Tells `subscriber` the outcome, now or when it comes; returns how to stop waiting. */
  subscribe(subscriber: Subscriber<T>): () => void {
    const outcome = this.outcome;
    if (outcome) {
      tell(subscriber, outcome);
      return noop;
    }
    (this.waiting ??= []).push(subscriber);
    return () => {
      const at = this.waiting?.indexOf(subscriber) ?? -1;
      if (at >= 0) this.waiting?.splice(at, 1);
    };
  }

  private settle(outcome: { readonly receipt: T } | { readonly error: unknown }): void {
    if (this.outcome) return;
    this.outcome = outcome;
    const waiting = this.waiting;
    this.waiting = undefined;
    if (waiting) for (const subscriber of waiting) tell(subscriber, outcome);
  }
}

function tell<T>(subscriber: Subscriber<T>, outcome: { readonly receipt: T } | { readonly error: unknown }): void {
  if ('receipt' in outcome) {
    subscriber.next(outcome.receipt);
    subscriber.complete();
  } else {
    subscriber.error(outcome.error);
  }
}

function noop(): void {}
