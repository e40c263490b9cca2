import { encodeEntry, FORMAT_VERSION_2 } from '../model/codec.js';
import type { DeadLetterReason, DeadLetterRecord } from '../model/dead-letter.js';
import type { RequeuedLetter } from '../redis/gateway.js';
import { type QueueKeys } from '../redis/keys.js';
import { AdminPart } from './part.js';

/** Which dead letters an operation applies to: all of them, or those with the given task ids. */
export type DeadLetterSelection = 'all' | { readonly ids: readonly string[] } | { readonly filter: DeadLetterFilter };

/** Dead letters matching every given field. */
export interface DeadLetterFilter {
  readonly reason?: DeadLetterReason;
  readonly clientId?: string;
  /** A substring of the error's message (or, without an error, of the detail). */
  readonly error?: string;
  /** Only those that died at least this long ago (ms). */
  readonly olderThanMs?: number;
}

/** Whether a record is one the selection names. */
export function selects(selection: DeadLetterSelection, record: DeadLetterRecord, now = Date.now()): boolean {
  if (selection === 'all') return true;
  if ('ids' in selection) return record.id !== undefined && selection.ids.includes(record.id);
  const { reason, clientId, error, olderThanMs } = selection.filter;
  return (
    (reason === undefined || record.reason === reason) &&
    (clientId === undefined || record.clientId === clientId) &&
    (error === undefined || (record.error?.message ?? record.detail ?? '').includes(error)) &&
    (olderThanMs === undefined || now - record.deadAt >= olderThanMs)
  );
}

/** A page of dead letters (see `findDeadLetters`). */
export interface DeadLetterPage {
  readonly records: readonly DeadLetterRecord[];
  /** Dead letters of the queue in all (matching or not). */
  readonly total: number;
  /** Where the next page starts, or null when this page reached the end. */
  readonly nextOffset: number | null;
}

export interface RequeueDeadLettersResult {
  /** Dead letters given a fresh run (attempts reset). */
  readonly requeued: number;
  /** Selected records that cannot run again (malformed: no client or payload to run). */
  readonly skipped: number;
}

const CHUNK = 500;
/**
 * About how many bytes one LRANGE of dead letters returns: records are read a few at a time when they are
 * large (1 MB payloads), so no single command holds Redis for long (one LRANGE of 500 such records took
 * over a second, and every other client waited).
 */
const READ_BYTES = 512 * 1024;
/** Most bytes a filtered page reads before it stops and says where to go on. */
const SCAN_BYTES = 16 * 1024 * 1024;

/** Records to ask for next, from the size of those just read (1 to CHUNK). */
function nextRows(raw: readonly string[], wanted: number): number {
  let bytes = 0;
  for (const text of raw) bytes += text.length;
  const average = raw.length === 0 ? 1 : Math.max(1, bytes / raw.length);
  return Math.max(1, Math.min(CHUNK, wanted, Math.floor(READ_BYTES / average)));
}

/** The dead letters of a queue: list, count, requeue (a fresh run) and purge, by selection. */
export class DeadLetters extends AdminPart {
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

  /**
   * One page of the dead letters that match a filter, newest first: reads on from `offset` (a position
   * in the queue's dead letters, all shards in order) until `limit` match or `scanLimit` records were
   * read; `nextOffset` is where the next page starts (null at the end).
   */
  async findDeadLetters(
    queue: string,
    {
      offset = 0,
      limit = 50,
      filter = {},
      scanLimit = 5_000,
      scanBytes = SCAN_BYTES,
    }: { offset?: number; limit?: number; filter?: DeadLetterFilter; scanLimit?: number; scanBytes?: number } = {},
  ): Promise<DeadLetterPage> {
    const records: DeadLetterRecord[] = [];
    const now = Date.now();
    const filtered = filter.reason !== undefined || filter.clientId !== undefined;
    let position = 0;
    let read = 0;
    let bytes = 0;
    let nextOffset: number | null = null;
    let total = 0;
    // Unfiltered, a page reads exactly its rows; filtered, a few at first, then as many as READ_BYTES holds.
    let rows = filtered ? 10 : Math.min(limit, CHUNK);
    for (const keys of await this.shards(queue)) {
      const length = await this.redis.llen(keys.deadLetters);
      const start = Math.max(0, offset - position);
      for (let at = start; at < length && nextOffset === null;) {
        const want = filtered ? rows : Math.max(1, Math.min(rows, limit - records.length));
        const raw = await this.redis.lrange(keys.deadLetters, at, at + want - 1);
        if (raw.length === 0) break;
        for (const [i, text] of raw.entries()) {
          const record = parseRecord(text);
          read++;
          bytes += text.length;
          if (selects({ filter }, record, now)) records.push(record);
          if (records.length >= limit || read >= scanLimit || bytes >= scanBytes) {
            nextOffset = position + at + i + 1;
            break;
          }
        }
        at += raw.length;
        rows = nextRows(raw, filtered ? CHUNK : limit);
      }
      position += length;
      total += length;
    }
    return { records, total, nextOffset: nextOffset !== null && nextOffset < total ? nextOffset : null };
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
      const letters: RequeuedLetter[] = [];
      for (const { raw, record } of selected.slice(start, start + CHUNK)) {
        if (record.reason === 'malformed' || !record.id || !record.clientId || !('payload' in record)) {
          skipped++;
          continue;
        }
        // A fresh run: attempts reset; no expiry or deduplication key is carried over (its trace context is).
        const entry = encodeEntry({
          // A batch's task stays in its batch (stored form version 2, the batch first after `v`).
          ...(typeof record.batch === 'string' ? { v: FORMAT_VERSION_2, batch: record.batch } : {}),
          // A flow's node stays in its flow (awaited again while it runs), with the parents it was released with,
          // and says `fold` as it did (right after `node`): its revival and its settles apply in their own scripts.
          ...(typeof record.flow === 'string' && typeof record.node === 'string'
            ? {
                v: FORMAT_VERSION_2,
                flow: record.flow,
                node: record.node,
                ...(record.fold === 1 ? { fold: 1 } : {}),
                parents: record.parents,
              }
            : {}),
          id: record.id,
          clientId: record.clientId,
          enqueuedAt: record.enqueuedAt ?? Date.now(),
          ...(record.priority ? { priority: record.priority } : {}),
          // It stays in the trace of the call that first enqueued it.
          ...(typeof record.traceparent === 'string' ? { traceparent: record.traceparent } : {}),
          ...(typeof record.tracestate === 'string' ? { tracestate: record.tracestate } : {}),
          // A tracked task stays tracked: its index (still there, `dead`, for keepMs) says it waits again.
          ...(record.track === 1 ? { track: 1 as const } : {}),
          // Last, as the producer writes it: the scripts read the head fields before it (include/track.lua).
          payload: record.payload,
        });
        const tracked = record.track === 1 ? keys.tracked(record.id) : undefined;
        letters.push({ raw, clientId: record.clientId, entry, priority: record.priority ?? 0, tracked });
      }
      if (letters.length > 0) {
        requeued += await this.gateway.requeueDeadLetters(keys, letters);
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
        // UNLINK: a list of large records is freed in the background, not while every client waits.
        await this.redis.unlink(key);
        continue;
      }
      for (const { raw } of await this.select(keys, selection)) {
        removed += await this.redis.lrem(key, 1, raw);
      }
    }
    return removed;
  }

  /** The selected records of a shard, read a few at a time (see READ_BYTES), never the whole list in one command. */
  private async select(
    keys: QueueKeys,
    selection: DeadLetterSelection,
  ): Promise<{ raw: string; record: DeadLetterRecord }[]> {
    const now = Date.now();
    const selected: { raw: string; record: DeadLetterRecord }[] = [];
    let rows = 10;
    for (let at = 0; ;) {
      const raw = await this.redis.lrange(keys.deadLetters, at, at + rows - 1);
      if (raw.length === 0) break;
      for (const text of raw) {
        const record = parseRecord(text);
        if (selects(selection, record, now)) selected.push({ raw: text, record });
      }
      at += raw.length;
      rows = nextRows(raw, CHUNK);
    }
    return selected;
  }
}

/** A stored dead-letter record; one that is not JSON reads as a `malformed` record keeping the text. */
export function parseRecord(raw: string): DeadLetterRecord {
  try {
    return JSON.parse(raw) as DeadLetterRecord;
  } catch {
    return {
      pattern: '?',
      reason: 'malformed',
      detail: 'the dead-letter record is not valid JSON',
      attempts: 0,
      deadAt: 0,
      workerId: '?',
      raw,
    };
  }
}
