import { encodeEntry } from './codec.js';
import type { DeadLetterRecord } from './dead-letter.js';
import type { PrefixKeys, QueueKeys } from './keys.js';
import type { ShardCounts } from './shard-counts.js';
import { ScriptKeys } from './script-keys.js';
import type { TaskRedis } from './scripts.js';

/** Which dead letters an operation applies to: all of them, or those with the given task ids. */
export type DeadLetterSelection = 'all' | { readonly ids: readonly string[] };

export interface RequeueDeadLettersResult {
  /** Dead letters given a fresh run (attempts reset). */
  readonly requeued: number;
  /** Selected records that cannot run again (malformed: no client or payload to run). */
  readonly skipped: number;
}

const CHUNK = 500;

/**
 * Dead-letter operations on a queue (Nest-agnostic; `RedisTaskAdmin` exposes them in Nest). A sharded
 * queue's shards are read in shard order, as one list; the shard count is the one on record in Redis.
 */
export class TaskAdmin {
  constructor(
    private readonly redis: TaskRedis,
    private readonly keys: PrefixKeys,
    private readonly layouts: ShardCounts,
  ) {}

  private async shards(queue: string): Promise<readonly QueueKeys[]> {
    return (await this.layouts.layout(queue)).shards;
  }

  /** Queues that have had a worker under this prefix. */
  async queues(): Promise<string[]> {
    return (await this.redis.smembers(this.keys.queues)).sort();
  }

  /** Dead letters of a queue, newest first. */
  async listDeadLetters(queue: string, { offset = 0, limit = 100 } = {}): Promise<DeadLetterRecord[]> {
    const records: DeadLetterRecord[] = [];
    let skip = offset;
    for (const keys of await this.shards(queue)) {
      if (records.length >= limit) break;
      const raw = await this.redis.lrange(keys.deadLetters, skip, skip + limit - records.length - 1);
      records.push(...raw.map((record) => parseRecord(record)));
      // Records of this shard that the offset skipped; the rest of the offset applies to the next shard.
      skip = raw.length > 0 ? 0 : Math.max(0, skip - (await this.redis.llen(keys.deadLetters)));
    }
    return records;
  }

  async countDeadLetters(queue: string): Promise<number> {
    let count = 0;
    for (const keys of await this.shards(queue)) {
      count += await this.redis.llen(keys.deadLetters);
    }
    return count;
  }

  /**
   * Gives selected dead letters a fresh run: each goes to the tail of its client's list with its
   * attempts reset, removed from dead letters in the same atomic step (so it runs once, even when two
   * operators requeue it at the same time).
   */
  async requeueDeadLetters(queue: string, selection: DeadLetterSelection): Promise<RequeueDeadLettersResult> {
    let requeued = 0;
    let skipped = 0;
    // A dead letter goes back to the shard it died in, which is its client's shard.
    for (const keys of await this.shards(queue)) {
      const result = await this.requeueShard(keys, selection);
      requeued += result.requeued;
      skipped += result.skipped;
    }
    return { requeued, skipped };
  }

  private async requeueShard(keys: QueueKeys, selection: DeadLetterSelection): Promise<RequeueDeadLettersResult> {
    const selected = await this.select(keys, selection);
    let requeued = 0;
    let skipped = 0;
    for (let start = 0; start < selected.length; start += CHUNK) {
      const scriptKeys = new ScriptKeys([keys.deadLetters, keys.ring, keys.sequence, keys.prioritized]);
      const fields: (string | number)[] = [];
      for (const { raw, record } of selected.slice(start, start + CHUNK)) {
        if (record.reason === 'malformed' || !record.id || !record.clientId || !('payload' in record)) {
          skipped++;
          continue;
        }
        // A fresh run: attempts reset; no expiry or deduplication key is carried over.
        const entry = encodeEntry({
          id: record.id,
          clientId: record.clientId,
          payload: record.payload,
          enqueuedAt: record.enqueuedAt ?? Date.now(),
          ...(record.priority ? { priority: record.priority } : {}),
        });
        fields.push(raw, ...scriptKeys.client(keys, record.clientId), record.clientId, entry, record.priority ?? 0);
      }
      if (fields.length > 0) {
        requeued += await this.redis.requeueDeadLetters(...(scriptKeys.args as [number]), ...fields);
      }
    }
    return { requeued, skipped };
  }

  /** Deletes selected dead letters; resolves with how many were removed. */
  async purgeDeadLetters(queue: string, selection: DeadLetterSelection): Promise<number> {
    let removed = 0;
    for (const keys of await this.shards(queue)) {
      const key = keys.deadLetters;
      if (selection === 'all') {
        removed += await this.redis.llen(key);
        await this.redis.del(key);
        continue;
      }
      for (const { raw } of await this.select(keys, selection)) {
        removed += await this.redis.lrem(key, 1, raw);
      }
    }
    return removed;
  }

  private async select(keys: QueueKeys, selection: DeadLetterSelection): Promise<{ raw: string; record: DeadLetterRecord }[]> {
    const all = await this.redis.lrange(keys.deadLetters, 0, -1);
    const wanted = selection === 'all' ? undefined : new Set(selection.ids);
    return all
      .map((raw) => ({ raw, record: parseRecord(raw) }))
      .filter(({ record }) => !wanted || (record.id !== undefined && wanted.has(record.id)));
  }
}

function parseRecord(raw: string): DeadLetterRecord {
  try {
    return JSON.parse(raw) as DeadLetterRecord;
  } catch {
    return { pattern: '?', reason: 'malformed', detail: 'the dead-letter record is not valid JSON', attempts: 0, deadAt: 0, workerId: '?', raw };
  }
}
