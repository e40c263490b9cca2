import { defer, from, mergeMap, Observable, type Subscriber } from 'rxjs';
import type { EnqueueItem, TaskProducer } from '../core/producer/producer.js';
import type { EmitOutcome } from './emit-outcome.js';

/**
 * What a client's emit and send do before its connection is open: connecting counts against the call's one
 * deadline (`enqueueTimeoutMs` from the call, or from the subscription for a send).
 */

/** An emit made while connecting: handed to the producer once connected, within the emit's deadline. */
export function emitWhenConnected<T>(
  connect: () => Promise<unknown>,
  producer: () => TaskProducer,
  queue: string,
  item: () => EnqueueItem,
  outcome: EmitOutcome<T>,
  timeoutMs: number,
): void {
  const deadline = Date.now() + timeoutMs;
  connect()
    .then(() => producer().enqueueOneTo(queue, item(), outcome, deadline))
    .catch((error: unknown) => outcome.failed(error));
}

/** A send subscribed to while connecting: connecting, subscribing to replies and enqueueing share one deadline. */
export function sendWhenConnected<T>(
  connect: () => Promise<unknown>,
  publish: (observer: Subscriber<T>, deadline: number) => () => void,
  timeoutMs: number,
): Observable<T> {
  return defer(() => {
    const deadline = Date.now() + timeoutMs;
    return from(connect()).pipe(mergeMap(() => new Observable<T>((observer) => publish(observer, deadline))));
  });
}
