import { eachOf } from '../support/each-of.js';
import { callbackGuard, callbackKindOf } from '../model/batch.js';
import type { ScriptGateway } from '../redis/gateway.js';
import { DEFAULT_GROUP, type PrefixKeys, type QueueKeys } from '../redis/keys.js';
import type { TaskStore } from '../redis/store.js';
import type { TaskRedis } from '../redis/scripts.js';
import { errorMessage, type TaskLogger } from '../support/logger.js';
import { enqueueCallbacks } from './batch-callbacks.js';
import { SETTLED_GUARD_MS } from '../redis/call-record.js';
import type { FireAnswer } from '../redis/batch-gateway.js';

/** Events folded per read of a shard's list. */
const FOLD_SLICE = 1_000;
/** How often a batch in the due index is checked again (ms). */
export const BATCH_RECHECK_MS = 30_000;

/**
 * The second step of a batch task's settle, run by reapers: a shard's batch events (written by the settle
 * scripts, in the task's own slot) are folded into each batch's record (its own slot), then dropped. No
 * lock: folding applies each task's events once and in order whoever folds them, and the events are dropped
 * only while they are still their list's head, so two reapers at once, or one again after a crash (kill -9,
 * a Redis restart from AOF), fold the same events without counting one twice or losing one. A batch that
 * completes has its callbacks enqueued (exactly once, see enqueueCallbacks) before its events are dropped.
 */
export class BatchFolder {
  private readonly gateway: ScriptGateway;

  private readonly redis: TaskRedis;
  private readonly keys: PrefixKeys;

  constructor(
    private readonly store: TaskStore,
    private readonly logger?: TaskLogger,
  ) {
    this.redis = store.redis;
    this.keys = store.keys;
    this.gateway = store.gateway;
  }

  /** Folds a shard's batch events (the default group's: only its runs count); how many were folded. */
  async fold(queue: QueueKeys): Promise<number> {
    if (queue.group !== DEFAULT_GROUP) return 0;
    let folded = 0;
    for (;;) {
      const events = await this.redis.lrange(queue.batchEvents, 0, FOLD_SLICE - 1);
      if (events.length === 0) return folded;
      // table-ok: lives for one slice
      const byBatch = new Map<string, string[]>();
      for (const event of events) {
        const [seq, batch, child, outcome] = event.split('\n');
        if (outcome === undefined) continue; // not an event of ours: dropped with the rest
        const fields = byBatch.get(batch);
        if (fields) fields.push(seq, child, outcome);
        else byBatch.set(batch, [seq, child, outcome]);
      }
      // A batch whose fold fails leaves the others folded; the events stay (folded again later) and it is thrown.
      await eachOf(byBatch, async ([batch, fields]) => {
        const answer = await this.gateway.batch.fold(this.keys.batch(batch), fields);
        await this.settle(batch, answer);
        if (answer.kind === 'done') await this.dropGuards(queue, batch, answer.created, fields);
      });
      await this.gateway.batch.trim(queue.batchEvents, events);
      folded += events.length;
      if (events.length < FOLD_SLICE) return folded;
    }
  }

  /**
   * Batches in the due index whose next check came (Redis ms `now`): one that completed and has no callbacks
   * on record (a crash cut the enqueue off) has them enqueued; one whose record is gone leaves the index.
   */
  async checkDue(now: number): Promise<void> {
    const due = this.keys.batchesDue;
    await eachOf(await this.redis.zrangebyscore(due, '-inf', now, 'LIMIT', 0, 100), async (id) => {
      const answer = await this.gateway.batch.fold(this.keys.batch(id), []);
      // Gone, or its callbacks on record (a crash cut its enqueuer off before it left the index): done here.
      if (answer.kind === 'unknown' || answer.kind === 'done') await this.redis.zrem(due, id);
      else if (answer.kind === 'fire') await this.settle(id, answer);
      else await this.redis.zadd(due, 'XX', now + BATCH_RECHECK_MS, id);
    });
  }

  /**
   * A callback that settled (its event folded while the callbacks are on record) is decided by no fold any
   * more: its deduplication guard, in this shard (where it ran), is kept only past the deadline of an enqueue
   * of it still on its way from a process that decided before (`SETTLED_GUARD_MS`), not as long as the batch.
   */
  private async dropGuards(queue: QueueKeys, batch: string, created: string, fields: readonly string[]): Promise<void> {
    for (let i = 0; i + 2 < fields.length; i += 3) {
      const which = callbackKindOf(batch, fields[i + 1]);
      if (which && (fields[i + 2] === 's' || fields[i + 2] === 'd')) {
        await this.redis.pexpire(queue.dedup(callbackGuard(batch, created, which)), SETTLED_GUARD_MS);
      }
    }
  }

  private async settle(id: string, answer: FireAnswer): Promise<void> {
    if (answer.kind !== 'fire') return;
    try {
      const callbacks = await enqueueCallbacks(this.store, id, answer);
      this.logger?.log(`batch ${id} completed: enqueued ${callbacks.join(', ')}`);
    } catch (error) {
      // Its events stay (they are dropped after this), and the due index holds it: enqueued by a later fold.
      this.logger?.error(`could not enqueue the callbacks of batch ${id}: ${errorMessage(error)}`);
      throw error;
    }
  }
}
