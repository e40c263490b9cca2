import type { ProducerTrace, TaskTracing } from '../support/tracing.js';
import type { EnqueueItem } from './task-items.js';
import type { EnqueueAnswer } from './producer-types.js';

/**
 * The PRODUCER spans of enqueue calls (OpenTelemetry): one per call, whose W3C context every task of the
 * call carries, so each run of a handler is a child of the call that enqueued it. A batch is one span
 * (`messaging.batch.message_count`), not one per task.
 */
export function tracedOne(
  tracing: TaskTracing,
  queue: string,
  item: EnqueueItem,
  to: EnqueueAnswer,
  enqueue: (item: EnqueueItem, to: EnqueueAnswer) => void,
): void {
  const span = tracing.produce(item.replyTo === undefined ? 'emit' : 'send', queue, item.clientId, 1);
  if (!span.live) return enqueue(item, to); // the API without an SDK: nothing more per emit
  enqueue(span.context ? Object.assign({}, item, { trace: span.context }) : item, {
    written(receipt) {
      span.end([receipt.id]);
      to.written(receipt);
    },
    failed(error) {
      span.end(undefined, error);
      to.failed(error);
    },
  });
}

export function tracedBatch<R extends { readonly id: string }>(
  tracing: TaskTracing,
  queue: string,
  items: readonly EnqueueItem[],
  enqueue: (items: readonly EnqueueItem[]) => Promise<R[]>,
): Promise<R[]> {
  const span = tracing.produce('emit', queue, items[0].clientId, items.length);
  if (!span.live) return enqueue(items);
  const context = span.context;
  return ended(
    span,
    enqueue(context ? items.map((item) => Object.assign({}, item, { trace: context })) : items),
    (receipts) => receipts.map((receipt) => receipt.id),
  );
}

/** Ends `span` with the call's outcome (the ids it enqueued, or its error). */
function ended<T>(span: ProducerTrace, call: Promise<T>, ids: (result: T) => string[]): Promise<T> {
  return call.then(
    (result) => {
      span.end(ids(result));
      return result;
    },
    (error: unknown) => {
      span.end(undefined, error);
      throw error;
    },
  );
}
