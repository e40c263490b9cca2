import { InvalidTaskError } from '../model/errors.js';
import type { BatchCancelResult, BatchStatus } from '../model/batch.js';
import { decodeEntry } from '../model/codec.js';
import type { QueueKeys } from '../redis/keys.js';
import { nameProblem } from '../config/rules.js';
import { describe } from '../support/describe.js';
import { AdminPart } from './part.js';

/**
 * Batches by id: where one is (`get`; its events not folded yet, within a reaper's sweep, are not counted),
 * and cancelling one (`cancel`).
 */
export class BatchReader extends AdminPart {
  async get(id: string): Promise<BatchStatus> {
    checkBatchId('getBatch()', id);
    const fields = (await this.redis.hgetall(this.keys.batch(id).record)) as Record<string, string>;
    const count = (name: string) => Number(fields[name] ?? 0) || 0;
    const [total, succeeded, failed, cancelled] = [
      count('total'),
      count('succeeded'),
      count('dead'),
      count('cancelled'),
    ];
    const state = fields.state;
    return {
      id,
      state: state === 'open' || state === 'sealed' || state === 'cancelled' ? state : 'unknown',
      total,
      pending: Math.max(0, total - succeeded - failed - cancelled),
      succeeded,
      failed,
      cancelled,
      callback: fields.callbacks !== undefined ? 'enqueued' : fields.fired !== undefined ? 'fired' : 'waiting',
      ...(fields.callbacks ? { callbackIds: fields.callbacks.split(',') } : {}),
      ...(fields.created ? { createdAt: Number(fields.created) } : {}),
      ...(fields.fired ? { firedAt: Number(fields.fired) } : {}),
    };
  }

  /** Batches opened and completed under the prefix (for metrics). */
  async counts(): Promise<{ opened: number; completed: number }> {
    const counted = (await this.redis.hgetall(this.keys.batchCounters)) as Record<string, string>;
    return { opened: Number(counted.opened ?? 0) || 0, completed: Number(counted.completed ?? 0) || 0 };
  }

  /**
   * Cancels a batch: no task can be added any more; its tasks still waiting are taken out of their queues,
   * those running are stopped through their fences (their handler's `ctx.signal` aborts with
   * `TaskCancelledError` within a heartbeat); each counts as cancelled, and the batch completes (its
   * callback enqueued once, with the cancelled count) once every task settled. Looks through the queues of
   * its patterns (their waiting and running tasks): an admin call, not one for a request path.
   */
  async cancel(id: string): Promise<BatchCancelResult> {
    checkBatchId('cancelBatch()', id);
    const gateway = this.gateway;
    const { before, patterns } = await gateway.batch.cancel(this.keys.batch(id));
    if (before === 'unknown') return { cancelled: false, state: 'unknown' };
    let removed = 0;
    let stopped = 0;
    const marker = `{"v":2,"batch":${JSON.stringify(id)},`;
    for (const pattern of patterns) {
      for (const keys of (await this.layouts.layout(pattern)).shards) {
        removed += await this.removeWaiting(keys, marker);
        for (const workerId of await this.redis.zrange(keys.workers, '0', '-1')) {
          const held = (await this.redis.hgetall(keys.processing(workerId))) as Record<string, string>;
          for (const [token, entry] of Object.entries(held)) {
            if (entry.includes(marker) && (await gateway.batch.dropHeld(keys, workerId, token, id))) stopped++;
          }
        }
      }
    }
    return { cancelled: true, was: before as 'open' | 'sealed' | 'cancelled', removed, stopped };
  }

  /** Takes the batch's waiting tasks (their entries carry `marker`) out of a shard's lists, sets and delayed set. */
  private async removeWaiting(keys: QueueKeys, marker: string): Promise<number> {
    const gateway = this.gateway;
    const clients = new Set([
      ...(await this.redis.lrange(keys.ring, 0, -1)),
      ...(await this.redis.smembers(keys.parked)),
      ...(await this.redis.zrange(keys.throttled, '0', '-1')),
    ]);
    const entries = [...(await this.redis.zrange(keys.delayed, '0', '-1'))];
    for (const client of clients) {
      entries.push(...(await this.redis.lrange(keys.pending(client), 0, -1)));
      // A priority set's member is a 15-digit sequence number, then the entry.
      entries.push(...(await this.redis.zrange(keys.priority(client), '0', '-1')).map((member) => member.slice(15)));
    }
    let removed = 0;
    for (const entry of entries.filter((one) => one.includes(marker))) {
      const decoded = decodeEntry(entry);
      if (!decoded.ok) continue;
      const { id, clientId, priority } = decoded.entry.envelope;
      if (await gateway.track.cancel(keys, { clientId, entry, priority: priority ?? 0, id })) removed++;
    }
    return removed;
  }
}

/** Refuses an id no batch can have, naming the call. */
function checkBatchId(call: string, id: unknown): void {
  const problem = nameProblem(id);
  if (problem) throw new InvalidTaskError(`${call}: the batch id ${problem}, got ${describe(id)}`);
}
