import { encodeEntry } from './codec.js';
import type { DeadLetterRecord } from './dead-letter.js';
import type { PrefixKeys } from './keys.js';
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

/** Dead-letter operations on a queue (Nest-agnostic; `RedisTaskAdmin` exposes them in Nest). */
export class TaskAdmin {
  constructor(
    private readonly redis: TaskRedis,
    private readonly keys: PrefixKeys,
  ) {}

  /** Queues that have had a worker under this prefix. */
  async queues(): Promise<string[]> {
    return (await this.redis.smembers(this.keys.queues)).sort();
  }

  /** Dead letters of a queue, newest first. */
  async listDeadLetters(queue: string, { offset = 0, limit = 100 } = {}): Promise<DeadLetterRecord[]> {
    const raw = await this.redis.lrange(this.keys.queue(queue).deadLetters, offset, offset + limit - 1);
    return raw.map((record) => parseRecord(record));
  }

  async countDeadLetters(queue: string): Promise<number> {
    return this.redis.llen(this.keys.queue(queue).deadLetters);
  }

  /**
   * Gives selected dead letters a fresh run: each goes to the tail of its client's list with its
   * attempts reset, removed from dead letters in the same atomic step (so it runs once, even when two
   * operators requeue it at the same time).
   */
  async requeueDeadLetters(queue: string, selection: DeadLetterSelection): Promise<RequeueDeadLettersResult> {
    const keys = this.keys.queue(queue);
    const selected = await this.select(queue, selection);
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
    const key = this.keys.queue(queue).deadLetters;
    if (selection === 'all') {
      const count = await this.redis.llen(key);
      await this.redis.del(key);
      return count;
    }
    const selected = await this.select(queue, selection);
    let removed = 0;
    for (const { raw } of selected) {
      removed += await this.redis.lrem(key, 1, raw);
    }
    return removed;
  }

  private async select(queue: string, selection: DeadLetterSelection): Promise<{ raw: string; record: DeadLetterRecord }[]> {
    const all = await this.redis.lrange(this.keys.queue(queue).deadLetters, 0, -1);
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
