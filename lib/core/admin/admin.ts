import type { Redis } from 'ioredis';
import { decodeEntry, encodeEntry } from '../model/codec.js';
import { InvalidOptionError } from '../model/errors.js';
import { validateGroup, validateRate } from '../config/options.js';
import type { DeadLetterReason, DeadLetterRecord } from '../model/dead-letter.js';
import { DEFAULT_GROUP, type PrefixKeys, type QueueKeys } from '../redis/keys.js';
import type { ShardCounts } from '../redis/layouts.js';
import { gatewayOf } from '../redis/gateway.js';
import type { TaskRedis } from '../redis/scripts.js';

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

/** A Redis WRONGTYPE reply (the error code is the reply's first word). */
function isWrongType(error: unknown): boolean {
  return error instanceof Error && error.message.startsWith('WRONGTYPE');
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

export interface RequeueDeadLettersResult {
  /** Dead letters given a fresh run (attempts reset). */
  readonly requeued: number;
  /** Selected records that cannot run again (malformed: no client or payload to run). */
  readonly skipped: number;
}

const CHUNK = 500;

/** What removing a consumer group deleted. */
export interface RemovedGroup {
  readonly pending: number;
  readonly delayed: number;
  /** Copies its workers held. */
  readonly inFlight: number;
  readonly deadLetters: number;
}

/** Largest client weight. */
export const MAX_WEIGHT = 1_000;

/** Task outcomes counted since the queue was first used. */
export interface QueueCounters {
  /** Handler succeeded, task acknowledged. */
  readonly completed: number;
  /** Handler runs that failed (each retry and each final failure). */
  readonly failed: number;
  /** Failed runs given another attempt. */
  readonly retried: number;
  /** Tasks moved to dead letters, for any reason. */
  readonly deadLettered: number;
}

/** A snapshot of one queue (all its shards). */
export interface QueueStats {
  readonly queue: string;
  readonly shards: number;
  readonly paused: boolean;
  /** Pending tasks (ready to claim) in all, and per client, most first. */
  readonly pending: { readonly total: number; readonly byClient: Readonly<Record<string, number>> };
  /** Tasks claimed and not settled, in all and per worker. */
  readonly inFlight: { readonly total: number; readonly byWorker: Readonly<Record<string, number>> };
  /** Tasks waiting for a due time (delays and retry backoffs). */
  readonly delayed: number;
  readonly deadLetters: number;
  /** Age of the oldest pending task (ms, by the enqueuing process's clock), or null when none is pending. */
  readonly oldestPendingAgeMs: number | null;
  readonly counters: QueueCounters;
  /**
   * Broken data found in Redis: keys of the wrong type (found now, or quarantined by a script, which
   * renamed them aside), weights or counts that are not numbers. Empty when all is well.
   */
  readonly faults: readonly QueueFault[];
}

/** A piece of broken Redis data of a queue, and what was done about it. */
export interface QueueFault {
  /** The key (or "key field") concerned. */
  readonly subject: string;
  readonly detail: string;
  /** When a script recorded it (ms, Redis clock); null for what this read found. */
  readonly at: number | null;
}

/** A worker registered in a queue. */
export interface WorkerInfo {
  readonly workerId: string;
  readonly queue: string;
  /** When its lease runs out unless renewed (ms since the epoch, Redis clock); each heartbeat pushes it on. */
  readonly leaseExpiresAt: number;
  /** When it last renewed its lease (ms since the epoch, Redis clock), if known. */
  readonly lastHeartbeatAt: number | null;
  /** False once the lease ran out: the worker died or hung, and a reaper will recover its tasks. */
  readonly alive: boolean;
  readonly inFlight: number;
}

/**
 * Dead-letter operations on a queue (Nest-agnostic; `RedisTaskAdmin` exposes them in Nest). A sharded
 * queue's shards are read in shard order, as one list; the shard count is the one on record in Redis.
 */
export class TaskAdmin {
  constructor(
    private readonly redis: TaskRedis,
    private readonly keys: PrefixKeys,
    private readonly layouts: ShardCounts,
    /** The consumer group whose copies this admin reads and changes. */
    readonly group = DEFAULT_GROUP,
  ) {}

  /** The same operations on another consumer group's copies. */
  forGroup(group: string): TaskAdmin {
    validateGroup('group', group);
    return new TaskAdmin(this.redis, this.keys, this.layouts, group);
  }

  private async shards(queue: string): Promise<readonly QueueKeys[]> {
    return (await this.layouts.layout(queue)).shards.map((shard) => shard.forGroup(this.group));
  }

  /** Consumer groups registered on a pattern (each gets a copy of every task). */
  async groups(queue: string): Promise<string[]> {
    const names = new Set<string>();
    for (const keys of await this.shards(queue)) {
      for (const name of await this.redis.smembers(keys.groups)) names.add(name);
    }
    return [...names].sort();
  }

  /**
   * Unregisters a consumer group from a pattern and deletes its copies: pending, delayed, held by its
   * workers, and its dead letters. Stop the group's workers first (a running one registers it again).
   */
  async removeGroup(queue: string, group: string): Promise<RemovedGroup> {
    validateGroup('group', group);
    const removed = { pending: 0, delayed: 0, inFlight: 0, deadLetters: 0 };
    for (const shard of (await this.layouts.layout(queue)).shards) {
      const keys = shard.forGroup(group);
      await this.redis.srem(keys.groups, group);
      const clients = new Set([
        ...(await this.redis.lrange(keys.ring, 0, -1)),
        ...(await this.redis.smembers(keys.parked)),
        ...(await this.redis.zrange(keys.throttled, '0', '-1')),
      ]);
      const doomed: string[] = [];
      for (const clientId of clients) {
        removed.pending += (await this.redis.llen(keys.pending(clientId))) + (await this.redis.zcard(keys.priority(clientId)));
        doomed.push(keys.pending(clientId), keys.priority(clientId));
      }
      for (const workerId of await this.redis.zrange(keys.workers, '0', '-1')) {
        removed.inFlight += await this.redis.hlen(keys.processing(workerId));
        doomed.push(keys.processing(workerId));
      }
      removed.delayed += await this.redis.zcard(keys.delayed);
      removed.deadLetters += await this.redis.llen(keys.deadLetters);
      doomed.push(
        keys.ring, keys.parked, keys.throttled, keys.delayed, keys.deadLetters, keys.prioritized, keys.inflight, keys.counted,
        keys.credit, keys.buckets, keys.weights, keys.rates, keys.paused, keys.counters, keys.workers, keys.heartbeats, keys.sequence,
      );
      for (let i = 0; i < doomed.length; i += CHUNK) {
        await this.redis.del(...doomed.slice(i, i + CHUNK));
      }
    }
    return removed;
  }

  /**
   * Depth, in-flight work, delays, dead letters, oldest task age and outcome counters of a queue. Never
   * fails on broken data: a key of the wrong type is read as empty and listed in `faults`.
   */
  async stats(queue: string): Promise<QueueStats> {
    const shards = await this.shards(queue);
    const byClient = new Map<string, number>();
    const byWorker = new Map<string, number>();
    const counters = { completed: 0, failed: 0, retried: 0, deadLettered: 0 };
    const faults: QueueFault[] = [];
    // A read of a key that holds another type (WRONGTYPE) reads as `empty` and is reported.
    const read = async <T>(key: string, kind: string, reading: Promise<T>, empty: T): Promise<T> => {
      try {
        return await reading;
      } catch (error) {
        if (!isWrongType(error)) throw error;
        faults.push({ subject: key, detail: `holds another type than a ${kind}`, at: null });
        return empty;
      }
    };
    let delayed = 0;
    let deadLetters = 0;
    let oldest: number | undefined;
    let paused = false;
    for (const keys of shards) {
      const [ring, parked, workers, delayedCount, deadCount, pausedFlag, counted, recorded] = await Promise.all([
        read(keys.ring, 'list', this.redis.lrange(keys.ring, 0, -1), []),
        read(keys.parked, 'set', this.redis.smembers(keys.parked), []),
        read(keys.workers, 'sorted set', this.redis.zrange(keys.workers, '0', '-1'), []),
        read(keys.delayed, 'sorted set', this.redis.zcard(keys.delayed), 0),
        read(keys.deadLetters, 'list', this.redis.llen(keys.deadLetters), 0),
        this.redis.exists(keys.paused),
        read(keys.counters, 'hash', this.redis.hgetall(keys.counters) as Promise<Record<string, string>>, {}),
        read(keys.faults, 'hash', this.redis.hgetall(keys.faults) as Promise<Record<string, string>>, {}),
      ]);
      for (const [subject, text] of Object.entries(recorded)) {
        if (subject.startsWith('#')) continue;
        const [at, ...rest] = text.split(' ');
        faults.push({ subject, detail: rest.join(' '), at: Number(at) || null });
      }
      delayed += delayedCount;
      deadLetters += deadCount;
      paused ||= pausedFlag === 1;
      for (const name of Object.keys(counters) as (keyof QueueCounters)[]) {
        counters[name] += Number(counted[name] ?? 0) || 0;
      }
      for (const clientId of new Set([...ring, ...parked])) {
        const list = keys.pending(clientId);
        const set = keys.priority(clientId);
        const [listed, prioritized, head, priorityHead] = await Promise.all([
          read(list, 'list', this.redis.llen(list), 0),
          read(set, 'sorted set', this.redis.zcard(set), 0),
          this.redis.lindex(list, 0).catch(() => null),
          this.redis.zrange(set, '0', '0').catch(() => []),
        ]);
        if (listed + prioritized > 0) byClient.set(clientId, (byClient.get(clientId) ?? 0) + listed + prioritized);
        // Sequence-prefixed members of a priority set: the encoded entry starts after 15 digits.
        for (const raw of [head, priorityHead[0]?.slice(15)]) {
          const decoded = raw ? decodeEntry(raw) : undefined;
          if (decoded?.ok) oldest = Math.min(oldest ?? Infinity, decoded.entry.envelope.enqueuedAt);
        }
      }
      for (const workerId of workers) {
        const processing = keys.processing(workerId);
        const held = await read(processing, 'hash', this.redis.hlen(processing), 0);
        if (held > 0) byWorker.set(workerId, (byWorker.get(workerId) ?? 0) + held);
      }
    }
    const sorted = [...byClient].sort((a, b) => b[1] - a[1]);
    return {
      queue,
      shards: shards.length,
      paused,
      pending: { total: sorted.reduce((sum, [, n]) => sum + n, 0), byClient: Object.fromEntries(sorted) },
      inFlight: { total: [...byWorker.values()].reduce((sum, n) => sum + n, 0), byWorker: Object.fromEntries(byWorker) },
      delayed,
      deadLetters,
      oldestPendingAgeMs: oldest === undefined ? null : Math.max(0, Date.now() - oldest),
      counters,
      faults,
    };
  }

  /** Forgets the recorded faults of a queue (after the broken keys were looked at and dealt with). */
  async clearFaults(queue: string): Promise<number> {
    let cleared = 0;
    for (const keys of await this.shards(queue)) {
      const subjects = Object.keys((await this.redis.hgetall(keys.faults)) as Record<string, string>).filter((subject) => !subject.startsWith('#'));
      if (subjects.length > 0) cleared += await this.redis.hdel(keys.faults, ...subjects);
    }
    return cleared;
  }

  /** Workers registered in the queues (all queues under the prefix when none is given), with their leases. */
  async workers(queue?: string): Promise<WorkerInfo[]> {
    const [seconds, micros] = await this.redis.time();
    const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
    const found: WorkerInfo[] = [];
    for (const name of queue === undefined ? await this.queues() : [queue]) {
      const byWorker = new Map<string, { leaseExpiresAt: number; lastHeartbeatAt: number | null; inFlight: number }>();
      for (const keys of await this.shards(name)) {
        // The typed method, not call(): only it maps RESP3's nested [member, score] pairs to a flat array.
        const scored = await (this.redis as Redis).zrange(keys.workers, '0', '-1', 'WITHSCORES');
        const beats = (await this.redis.hgetall(keys.heartbeats)) as Record<string, string>;
        for (let i = 0; i < scored.length; i += 2) {
          const workerId = scored[i];
          const known = byWorker.get(workerId) ?? { leaseExpiresAt: 0, lastHeartbeatAt: null, inFlight: 0 };
          known.leaseExpiresAt = Math.max(known.leaseExpiresAt, Number(scored[i + 1]));
          if (beats[workerId] !== undefined) known.lastHeartbeatAt = Math.max(known.lastHeartbeatAt ?? 0, Number(beats[workerId]));
          known.inFlight += await this.redis.hlen(keys.processing(workerId));
          byWorker.set(workerId, known);
        }
      }
      for (const [workerId, { leaseExpiresAt, lastHeartbeatAt, inFlight }] of byWorker) {
        found.push({ workerId, queue: name, leaseExpiresAt, lastHeartbeatAt, alive: leaseExpiresAt > now, inFlight });
      }
    }
    return found.sort((a, b) => a.queue.localeCompare(b.queue) || a.workerId.localeCompare(b.workerId));
  }

  /**
   * Gives a client a share of claims proportional to its weight (1 to 1,000; 1, the default, removes
   * it): a client of weight 3 gets three tasks for every one of a client of weight 1 while both have work.
   */
  async setClientWeight(queue: string, clientId: string, weight: number): Promise<void> {
    if (typeof clientId !== 'string' || clientId.length === 0) {
      throw new InvalidOptionError('clientId', `must be a non-empty string, got ${JSON.stringify(clientId)}`);
    }
    if (typeof weight !== 'number' || !Number.isInteger(weight) || weight < 1 || weight > MAX_WEIGHT) {
      throw new InvalidOptionError('weight', `must be an integer from 1 to ${MAX_WEIGHT}, got ${String(weight)}`);
    }
    const keys = (await this.layouts.layout(queue)).shardOf(clientId);
    if (weight === 1) {
      await this.redis.hdel(keys.weights, clientId);
    } else {
      await this.redis.hset(keys.weights, clientId, weight);
    }
  }

  /**
   * Limits how many tasks of one client start per second (overriding the pattern's `clientRateLimit`),
   * or removes the override with null.
   */
  async setClientRateLimit(queue: string, clientId: string, rate: number | null): Promise<void> {
    if (typeof clientId !== 'string' || clientId.length === 0 || clientId === '*') {
      throw new InvalidOptionError('clientId', `must be a client id, got ${JSON.stringify(clientId)}`);
    }
    if (rate !== null) validateRate('rate', rate);
    const keys = (await this.layouts.layout(queue)).shardOf(clientId);
    await (rate === null ? this.redis.hdel(keys.rates, clientId) : this.redis.hset(keys.rates, clientId, rate));
  }

  /** Clients whose weight is not 1. */
  async clientWeights(queue: string): Promise<Record<string, number>> {
    const weights: Record<string, number> = {};
    for (const keys of await this.shards(queue)) {
      for (const [clientId, weight] of Object.entries((await this.redis.hgetall(keys.weights)) as Record<string, string>)) {
        weights[clientId] = Number(weight);
      }
    }
    return weights;
  }

  /** Workers stop claiming from the queue (tasks running finish; producers still enqueue). */
  async pause(queue: string): Promise<void> {
    for (const keys of await this.shards(queue)) {
      await this.redis.set(keys.paused, String(Date.now()));
    }
  }

  /** Workers claim from the queue again; blocked loops are told at once. */
  async resume(queue: string): Promise<void> {
    for (const keys of await this.shards(queue)) {
      await this.redis.del(keys.paused);
      await this.redis.publish(keys.controlChannel, 'resume');
    }
  }

  /** True when the queue has pending, delayed, in-flight or dead-lettered tasks, a worker, or a shard count on record. */
  async exists(queue: string): Promise<boolean> {
    if ((await this.redis.sismember(this.keys.queues, queue)) === 1) return true;
    if ((await this.redis.exists(this.keys.shardCount(queue))) === 1) return true;
    for (const keys of await this.shards(queue)) {
      if ((await this.redis.exists(keys.ring, keys.delayed, keys.deadLetters, keys.workers, keys.parked)) > 0) return true;
    }
    return false;
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
      const letters: { raw: string; clientId: string; entry: string; priority: number }[] = [];
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
        letters.push({ raw, clientId: record.clientId, entry, priority: record.priority ?? 0 });
      }
      if (letters.length > 0) {
        requeued += await gatewayOf(this.redis).requeueDeadLetters(keys, letters);
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
    const now = Date.now();
    return all.map((raw) => ({ raw, record: parseRecord(raw) })).filter(({ record }) => selects(selection, record, now));
  }
}

function parseRecord(raw: string): DeadLetterRecord {
  try {
    return JSON.parse(raw) as DeadLetterRecord;
  } catch {
    return { pattern: '?', reason: 'malformed', detail: 'the dead-letter record is not valid JSON', attempts: 0, deadAt: 0, workerId: '?', raw };
  }
}
