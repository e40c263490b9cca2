import type { QueueKeys } from '../redis/keys.js';
import { perConnection } from '../redis/per-connection.js';
import { gatewayOf, type ScriptGateway } from '../redis/gateway.js';
import type { AckItem } from '../model/prepared-task.js';

/** One acknowledgement waiting for its call, and its caller. */
interface PendingAck {
  readonly ack: AckItem;
  readonly resolve: (held: boolean) => void;
  readonly reject: (error: unknown) => void;
}

interface Batch {
  readonly keys: QueueKeys;
  readonly workerId: string;
  readonly acks: PendingAck[];
}

/**
 * The acknowledgements that cannot ride on the claim call (a send() task's reply, a deduplication key to
 * free) made in one event-loop turn: one `ackTasks` call per worker and queue shard, right after the
 * turn (`process.nextTick`). Each stays fenced on its own token and is answered on its own.
 */
export class AckBatch {
  /** This turn's batches (a few): a new list each turn, never a cleared Map (see churn-tables.ts). */
  private waiting: Batch[] = [];
  private scheduled = false;

  constructor(private readonly gateway: ScriptGateway) {}

  /** Resolves true once Redis removed the task, false when the worker no longer held it (lease lost). */
  acknowledge(keys: QueueKeys, workerId: string, ack: AckItem): Promise<boolean> {
    return new Promise((resolve, reject) => {
      // One batch per worker and shard (its processing hash): found by those two, no key built per ack.
      let batch: Batch | undefined;
      for (const waiting of this.waiting)
        if (waiting.workerId === workerId && waiting.keys.base === keys.base) batch = waiting;
      if (batch) batch.acks.push({ ack, resolve, reject });
      else this.waiting.push({ keys, workerId, acks: [{ ack, resolve, reject }] });
      if (!this.scheduled) {
        this.scheduled = true;
        process.nextTick(this.flush);
      }
    });
  }

  private readonly flush = (): void => {
    this.scheduled = false;
    const batches = this.waiting;
    this.waiting = [];
    for (const { keys, workerId, acks } of batches) {
      this.gateway
        .acknowledge(
          keys,
          workerId,
          acks.map((pending) => pending.ack),
        )
        .then(
          (held) => acks.forEach((ack, i) => ack.resolve(held[i])),
          (error: unknown) => acks.forEach((ack) => ack.reject(error)),
        );
    }
  };
}

/** The acknowledgement batch of a connection (shared by every worker using it). */
export const ackBatchOf = perConnection((redis) => new AckBatch(gatewayOf(redis)));
