import type { QueueKeys } from './keys.js';
import { perConnection } from './per-connection.js';
import type { TaskRedis } from './scripts.js';

/** One acknowledgement waiting for its call: the script's 6 fields, and its caller. */
interface PendingAck {
  readonly fields: readonly (string | number)[];
  readonly resolve: (held: boolean) => void;
  readonly reject: (error: unknown) => void;
}

interface Batch {
  readonly keys: QueueKeys;
  readonly processing: string;
  readonly acks: PendingAck[];
}

/**
 * The acknowledgements that cannot ride on the claim call (a send() task's reply, a deduplication key to
 * free) made in one event-loop turn: one `ackTasks` call per worker and queue shard, right after the
 * turn (`process.nextTick`). Each stays fenced on its own token and is answered on its own.
 */
export class AckCoalescer {
  private readonly waiting = new Map<string, Batch>();
  private scheduled = false;

  constructor(private readonly redis: TaskRedis) {}

  /** Resolves true once Redis removed the task, false when the worker no longer held it (lease lost). */
  acknowledge(keys: QueueKeys, processing: string, fields: readonly (string | number)[]): Promise<boolean> {
    return new Promise((resolve, reject) => {
      const batch = this.waiting.get(processing);
      if (batch) batch.acks.push({ fields, resolve, reject });
      else this.waiting.set(processing, { keys, processing, acks: [{ fields, resolve, reject }] });
      if (!this.scheduled) {
        this.scheduled = true;
        process.nextTick(this.flush);
      }
    });
  }

  private readonly flush = (): void => {
    this.scheduled = false;
    const batches = [...this.waiting.values()];
    this.waiting.clear();
    for (const { keys, processing, acks } of batches) {
      const args: (string | number)[] = [];
      for (const ack of acks) args.push(...ack.fields);
      this.redis.ackTasks(processing, keys.counted, keys.inflight, keys.parked, keys.ring, keys.counters, keys.root, ...args).then(
        (results) => acks.forEach((ack, i) => ack.resolve(results[i] === 1)),
        (error: unknown) => acks.forEach((ack) => ack.reject(error)),
      );
    }
  };
}

/** The acknowledgement coalescer of a connection (shared by every worker using it). */
export const ackCoalescerOf = perConnection((redis) => new AckCoalescer(redis));
