import type { Redis } from 'ioredis';
import type { QueueKeys } from '../redis/keys.js';
import { decodeEntry } from '../model/codec.js';
import { AdminPart } from './part.js';
import { patternState, type PatternState } from './state.js';

/** A Redis WRONGTYPE reply (the error code is the reply's first word). */
function isWrongType(error: unknown): boolean {
  return error instanceof Error && error.message.startsWith('WRONGTYPE');
}

/** A read where a key that holds another type (WRONGTYPE) reads as `empty` and is reported in `faults`. */
function tolerantRead(faults: QueueFault[]) {
  return async <T>(key: string, kind: string, reading: Promise<T>, empty: T): Promise<T> => {
    try {
      return await reading;
    } catch (error) {
      if (!isWrongType(error)) throw error;
      faults.push({ subject: key, detail: `holds another type than a ${kind}`, at: null });
      return empty;
    }
  };
}

/** The faults the scripts recorded in a shard's faults hash (`subject -> "<ms> <detail>"`; `#` fields are counters). */
function recordedFaults(recorded: Readonly<Record<string, string>>): QueueFault[] {
  const found: QueueFault[] = [];
  for (const [subject, text] of Object.entries(recorded)) {
    if (subject.startsWith('#')) continue;
    const [at, ...rest] = text.split(' ');
    found.push({ subject, detail: rest.join(' '), at: Number(at) || null });
  }
  return found;
}

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
  /** Tracked tasks cancelled (`cancel()`), waiting or running. */
  readonly cancelled: number;
  /**
   * Tasks of a coalescing key that a newer task of the key took the place of: replaced while waiting,
   * superseded while running, or not run again (retry, recovery) because a newer one came.
   */
  readonly replaced: number;
}

/** A snapshot of one queue (all its shards). */
export interface QueueStats {
  readonly queue: string;
  readonly shards: number;
  readonly paused: boolean;
  /** `paused`, `no worker` (no live worker consumes it) or `running`: the word the CLI and dashboard show. */
  readonly state: PatternState;
  /**
   * Whether a worker (of any group) ever registered for the pattern on this prefix. False for a pattern that
   * was only emitted to: its tasks wait until a worker consumes it (a misspelt pattern, or a worker not
   * deployed yet); the producer also says so in its log, once per pattern.
   */
  readonly consumed: boolean;
  /** Workers registered on the pattern (in this group), and how many of them hold a live lease. */
  readonly workers: { readonly registered: number; readonly alive: number };
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

/** What a queue holds and who works on it: counts, faults found, workers, patterns. */
export class QueueStatsReader extends AdminPart {
  /**
   * Depth, in-flight work, delays, dead letters, oldest task age and outcome counters of a queue. Never
   * fails on broken data: a key of the wrong type is read as empty and listed in `faults`.
   */
  async stats(queue: string): Promise<QueueStats> {
    const shards = await this.shards(queue);
    const byClient = new Map<string, number>();
    const byWorker = new Map<string, number>();
    const counters = { completed: 0, failed: 0, retried: 0, deadLettered: 0, cancelled: 0, replaced: 0 };
    const faults: QueueFault[] = [];
    const read = tolerantRead(faults);
    let delayed = 0;
    let deadLetters = 0;
    let oldest: number | undefined;
    let paused = false;
    const registered = new Set<string>();
    const alive = new Set<string>();
    const now = await this.redisNow();
    const consumed = shards.length > 0 && (await this.redis.exists(shards[0].groups)) === 1;
    for (const keys of shards) {
      const [ring, parked, throttled, workers, delayedCount, deadCount, pausedFlag, counted, recorded] =
        await Promise.all([
          read(keys.ring, 'list', this.redis.lrange(keys.ring, 0, -1), []),
          read(keys.parked, 'set', this.redis.smembers(keys.parked), []),
          read(keys.throttled, 'sorted set', this.redis.zrange(keys.throttled, '0', '-1'), []),
          // The typed method, not call(): only it maps RESP3's nested [member, score] pairs to a flat array.
          read(keys.workers, 'sorted set', (this.redis as Redis).zrange(keys.workers, '0', '-1', 'WITHSCORES'), []),
          read(keys.delayed, 'sorted set', this.redis.zcard(keys.delayed), 0),
          read(keys.deadLetters, 'list', this.redis.llen(keys.deadLetters), 0),
          this.redis.exists(keys.paused),
          read(keys.counters, 'hash', this.redis.hgetall(keys.counters) as Promise<Record<string, string>>, {}),
          read(keys.faults, 'hash', this.redis.hgetall(keys.faults) as Promise<Record<string, string>>, {}),
        ]);
      faults.push(...recordedFaults(recorded));
      delayed += delayedCount;
      deadLetters += deadCount;
      paused ||= pausedFlag === 1;
      for (const name of Object.keys(counters) as (keyof QueueCounters)[]) {
        counters[name] += Number(counted[name] ?? 0) || 0;
      }
      // Clients with waiting tasks: on the ring, parked at their concurrency cap, or throttled by their rate limit.
      oldest = await this.pendingByClient(keys, new Set([...ring, ...parked, ...throttled]), read, byClient, oldest);
      await this.countWorkers(keys, workers, now, read, { registered, alive, byWorker });
    }
    const sorted = [...byClient].sort((a, b) => b[1] - a[1]);
    return {
      queue,
      shards: shards.length,
      paused,
      state: patternState({ paused, workersAlive: alive.size }),
      consumed,
      workers: { registered: registered.size, alive: alive.size },
      pending: { total: sorted.reduce((sum, [, n]) => sum + n, 0), byClient: Object.fromEntries(sorted) },
      inFlight: {
        total: [...byWorker.values()].reduce((sum, n) => sum + n, 0),
        byWorker: Object.fromEntries(byWorker),
      },
      delayed,
      deadLetters,
      oldestPendingAgeMs: oldest === undefined ? null : Math.max(0, Date.now() - oldest),
      counters,
      faults,
    };
  }

  /** Workers with their lease expiry (scored pairs): registered, alive, and what each holds. */
  private async countWorkers(
    keys: QueueKeys,
    workers: readonly string[],
    now: number,
    read: ReturnType<typeof tolerantRead>,
    into: { registered: Set<string>; alive: Set<string>; byWorker: Map<string, number> },
  ): Promise<void> {
    for (let i = 0; i < workers.length; i += 2) {
      const workerId = workers[i];
      into.registered.add(workerId);
      if (Number(workers[i + 1]) > now) into.alive.add(workerId);
      const held = await read(keys.processing(workerId), 'hash', this.redis.hlen(keys.processing(workerId)), 0);
      if (held > 0) into.byWorker.set(workerId, (into.byWorker.get(workerId) ?? 0) + held);
    }
  }

  /** Adds up a shard's pending tasks per client, and reads the oldest enqueue time among their heads. */
  private async pendingByClient(
    keys: QueueKeys,
    clients: ReadonlySet<string>,
    read: <T>(key: string, kind: string, reading: Promise<T>, empty: T) => Promise<T>,
    byClient: Map<string, number>,
    oldestSoFar: number | undefined,
  ): Promise<number | undefined> {
    let oldest = oldestSoFar;
    for (const clientId of clients) {
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
    return oldest;
  }

  /** Forgets the recorded faults of a queue (after the broken keys were looked at and dealt with). */
  async clearFaults(queue: string): Promise<number> {
    let cleared = 0;
    for (const keys of await this.shards(queue)) {
      const subjects = Object.keys((await this.redis.hgetall(keys.faults)) as Record<string, string>).filter(
        (subject) => !subject.startsWith('#'),
      );
      if (subjects.length > 0) cleared += await this.redis.hdel(keys.faults, ...subjects);
    }
    return cleared;
  }

  /** Workers registered in the queues (all queues under the prefix when none is given), with their leases. */
  async workers(queue?: string): Promise<WorkerInfo[]> {
    const now = await this.redisNow();
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
          if (beats[workerId] !== undefined)
            known.lastHeartbeatAt = Math.max(known.lastHeartbeatAt ?? 0, Number(beats[workerId]));
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

  /** True when the queue has pending, delayed, in-flight or dead-lettered tasks, a worker, or a shard count on record. */
  async exists(queue: string): Promise<boolean> {
    if ((await this.redis.sismember(this.keys.queues, queue)) === 1) return true;
    if ((await this.redis.exists(this.keys.shardCount(queue))) === 1) return true;
    for (const keys of await this.shards(queue)) {
      if (
        (await this.redis.exists(
          keys.ring,
          keys.delayed,
          keys.deadLetters,
          keys.workers,
          keys.parked,
          keys.throttled,
        )) > 0
      )
        return true;
    }
    return false;
  }

  /** Queues that have had a worker under this prefix. */
  async queues(): Promise<string[]> {
    return (await this.redis.smembers(this.keys.queues)).sort();
  }
}
