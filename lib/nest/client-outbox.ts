import { Observable } from 'rxjs';
import type { ResolvedClientOptions } from '../core/config/options.js';
import { InvalidTaskError } from '../core/model/errors.js';
import { outboxRows, type OutboxReceipt } from '../core/outbox/outbox-rows.js';
import type { OutboxWriter } from '../core/outbox/outbox-store.js';
import type { RelayTarget } from '../core/outbox/outbox-relay.js';
import type { EnqueueItem, TaskProducer } from '../core/producer/producer.js';

/** The client's side of the transactional outbox (see RedisTaskOutboxModule). */

/** The rows of the tasks, written in the caller's transaction; their receipts. */
export async function writeOutbox(
  outbox: OutboxWriter,
  pattern: string,
  items: readonly EnqueueItem[],
  options: ResolvedClientOptions,
): Promise<OutboxReceipt[]> {
  const { rows, receipts } = outboxRows(pattern, items, {
    maxPayloadBytes: options.maxPayloadBytes,
    deduplicationTtlMs: options.deduplicationTtlMs,
    track: options.track,
    // A row holds its whole task (the relay sends its fields as they are): its payload stays in its entry.
    outOfLineBytes: false,
  });
  await outbox.write(rows);
  return receipts.map((receipt) =>
    outbox.mode === 'outbox'
      ? { id: receipt.id, duplicate: receipt.duplicate, outbox: true }
      : { id: receipt.id, duplicate: receipt.duplicate, afterCommit: true },
  );
}

/** An emit's Observable of its outbox write: the receipt once the row is written (not committed). */
export function outboxEmit<T>(written: Promise<T>): Observable<T> {
  return new Observable<T>((subscriber) => {
    written.then(
      (receipt) => {
        subscriber.next(receipt);
        subscriber.complete();
      },
      (error: unknown) => subscriber.error(error),
    );
  });
}

/** Where the outbox relay hands rows over: a client's producer (connected on first use). */
export function outboxTarget(
  producer: () => Promise<TaskProducer>,
  current: () => TaskProducer | undefined,
): RelayTarget {
  return {
    relay: async (pattern, tasks, recordMs) => (await producer()).relay(pattern, tasks, recordMs),
    relayed: (pattern, tasks) => current()?.relayed(pattern, tasks),
  };
}

/** What cannot run inside a transaction with the outbox, and why. */
export function notInTransaction(what: string): InvalidTaskError {
  return new InvalidTaskError(
    `${what} cannot run inside a database transaction with the outbox: it would start before the transaction commits ` +
      '(and send() would wait for a handler that cannot see the commit); call it after the commit, or emit()',
  );
}
