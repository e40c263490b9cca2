import { decodeEntry } from '../model/codec.js';
import { DEFAULT_GROUP, type QueueKeys, type QueueLayout } from '../redis/keys.js';
import { TaskStore } from '../redis/store.js';
import type { TaskRedis } from '../redis/scripts.js';
import type { QueueCounters } from './stats.js';
import { patternState, type PatternState } from './state.js';

/** How many waiting clients per shard and group the overview reads the head task of (for the oldest age). */
export const OLDEST_SAMPLE = 50;

/** Completed and failed tasks in one minute. */
export interface MinuteRate {
  /** The minute (ms since the epoch, Redis clock, at its start). */
  readonly at: number;
  readonly completed: number;
  /** Failed attempts (retried or dead-lettered). */
  readonly failed: number;
  /** Tasks that went to dead letters. */
  readonly deadLettered: number;
  /** The minute under way: counted so far. */
  readonly partial?: boolean;
  /** Minutes with no record of their own (no reaper ran): what the gap counted, spread evenly over them. */
  readonly spread?: boolean;
}

/** What the dashboard's overview shows of one pattern (and consumer group), all shards together. */
export interface PatternOverview {
  readonly pattern: string;
  readonly group: string;
  readonly shards: number;
  readonly pending: number;
  /** Clients with pending tasks (in turn, throttled by a rate limit, or parked at a concurrency cap). */
  readonly clientsWaiting: number;
  readonly inFlight: number;
  readonly delayed: number;
  readonly deadLetters: number;
  readonly paused: boolean;
  readonly workers: number;
  readonly workersAlive: number;
  /** `paused`, `no worker` (no live worker consumes it) or `running`, as everywhere. */
  readonly state: PatternState;
  /** Age of the oldest waiting task (ms), or null when none waits. */
  readonly oldestWaitingAgeMs: number | null;
  /**
   * False when more clients wait than were sampled (`OLDEST_SAMPLE` per shard, the next in turn first):
   * the age is then the oldest among them, a lower bound.
   */
  readonly oldestExact: boolean;
  readonly counters: QueueCounters;
  /** Per minute over the last hour, oldest first, from the counters recorded each minute (by reapers). */
  readonly perMinute: readonly MinuteRate[];
}

/** The overview of every pattern under a prefix, with the Redis time it was read at. */
export interface Overview {
  readonly at: number;
  readonly patterns: readonly PatternOverview[];
}

/** A client of a pattern, as the pattern page lists it. */
export interface ClientRow {
  readonly clientId: string;
  /** In turn on the ring, throttled by its rate limit, or parked at its concurrency cap. */
  readonly state: 'ready' | 'throttled' | 'parked';
  readonly pending: number;
  /** Tasks in flight counted against its concurrency cap (0 when no cap is set). */
  readonly inFlight: number;
  readonly weight: number;
  /** Tasks started per second at most (its own limit, or the pattern's), or null for none. */
  readonly rateLimit: number | null;
}

/** A page of the clients waiting in a pattern. */
export interface ClientPage {
  readonly clients: readonly ClientRow[];
  /** The per-client concurrency cap the pattern's workers use, or null for none. */
  readonly clientConcurrency: number | null;
  readonly total: number;
  readonly offset: number;
}

/** A task a worker is running (from its processing hash). */
export interface RunningTask {
  readonly id: string;
  readonly clientId: string;
  readonly attempt: number;
  readonly enqueuedAt: number | null;
}

type GroupReply = [
  group: string,
  pending: number,
  waiting: number,
  delayed: number,
  dead: number,
  paused: number,
  workers: number,
  alive: number,
  inFlight: number,
  oldest: number,
  sampled: number,
  completed: number,
  failed: number,
  retried: number,
  deadLettered: number,
  history: string[],
  cancelled: number,
  replaced: number,
];

/**
 * What the dashboard reads (Nest-agnostic): the overview of every pattern in one script call per shard
 * (`readOverview`), a page of a pattern's clients, and what workers run. Costs are bounded by what is
 * shown, never by the number of clients or tasks.
 */
export class OverviewReader {
  /** Shard layouts: a recorded shard count never changes, so each pattern's is read once. */
  private readonly known = new Map<string, QueueLayout>();

  constructor(private readonly store: TaskStore) {}

  /** The reader of a prefix, each pattern's shard count read from its record in Redis. */
  static forPrefix(redis: TaskRedis, prefix: string): OverviewReader {
    return new OverviewReader(TaskStore.recorded(redis, prefix));
  }

  /** Every pattern in use under the prefix (those with tasks but no worker ever included), per consumer group. */
  async overview(): Promise<Overview> {
    const patterns = (await this.store.redis.smembers(this.store.keys.queues)).sort();
    const layouts = await Promise.all(patterns.map((pattern) => this.layout(pattern)));
    const replies = await Promise.all(
      layouts.map((layout) =>
        Promise.all(
          layout.shards.map(
            (shard) => this.store.gateway.readOverview(shard, OLDEST_SAMPLE) as Promise<[number, ...GroupReply[]]>,
          ),
        ),
      ),
    );
    let at = 0;
    const rows: PatternOverview[] = [];
    for (const [index, pattern] of patterns.entries()) {
      const byGroup = new Map<string, GroupReply[]>();
      for (const [now, ...groups] of replies[index]) {
        at = Math.max(at, now);
        for (const group of groups) byGroup.set(group[0], [...(byGroup.get(group[0]) ?? []), group]);
      }
      for (const [group, shards] of [...byGroup].sort(([a], [b]) =>
        a === DEFAULT_GROUP ? -1 : b === DEFAULT_GROUP ? 1 : a.localeCompare(b),
      )) {
        rows.push(summarize(pattern, group, layouts[index].shards.length, shards, at));
      }
    }
    return { at, patterns: rows };
  }

  /** The overview row of one pattern and consumer group (a read of its shards only), if it has any data. */
  async summary(pattern: string, group: string): Promise<PatternOverview | undefined> {
    const layout = await this.layout(pattern);
    const replies = await Promise.all(
      layout.shards.map(
        (shard) => this.store.gateway.readOverview(shard, OLDEST_SAMPLE) as Promise<[number, ...GroupReply[]]>,
      ),
    );
    let at = 0;
    const shards: GroupReply[] = [];
    for (const [now, ...groups] of replies) {
      at = Math.max(at, now);
      shards.push(...groups.filter((reply) => reply[0] === group));
    }
    return shards.length === 0 ? undefined : summarize(pattern, group, layout.shards.length, shards, at);
  }

  /** A page of the clients with pending tasks (in turn first, then throttled, then parked), all shards in order. */
  async clients(
    pattern: string,
    group: string,
    { offset = 0, limit = 50 }: { offset?: number; limit?: number } = {},
  ): Promise<ClientPage> {
    const shards = (await this.layout(pattern)).shards.map((shard) => shard.forGroup(group));
    const sizes = await Promise.all(
      shards.map(async (keys) => {
        const [ring, throttled, parked] = await Promise.all([
          this.store.redis.llen(keys.ring).catch(() => 0),
          this.store.redis.zcard(keys.throttled).catch(() => 0),
          this.store.redis.scard(keys.parked).catch(() => 0),
        ]);
        return { ring, throttled, parked };
      }),
    );
    const cap = Number(await this.store.redis.get(shards[0].clientConcurrency).catch(() => null));
    const wanted: { keys: QueueKeys; clientId: string; state: ClientRow['state'] }[] = [];
    let position = 0;
    for (const [i, keys] of shards.entries()) {
      for (const state of ['ready', 'throttled', 'parked'] as const) {
        const size = state === 'ready' ? sizes[i].ring : state === 'throttled' ? sizes[i].throttled : sizes[i].parked;
        const from = Math.max(0, offset - position);
        const to = Math.min(size, offset + limit - position);
        position += size;
        if (from >= to) continue;
        const ids =
          state === 'ready'
            ? await this.store.redis.lrange(keys.ring, from, to - 1)
            : state === 'throttled'
              ? await this.store.redis.zrange(keys.throttled, String(from), String(to - 1))
              : (await this.store.redis.smembers(keys.parked)).sort().slice(from, to);
        for (const clientId of ids) wanted.push({ keys, clientId, state });
      }
    }
    const clients = await Promise.all(
      wanted.map(async ({ keys, clientId, state }): Promise<ClientRow> => {
        const [listed, prioritized, inFlight, weight, own, all] = await Promise.all([
          this.store.redis.llen(keys.pending(clientId)).catch(() => 0),
          this.store.redis.zcard(keys.priority(clientId)).catch(() => 0),
          this.store.redis.hget(keys.inflight, clientId).catch(() => null),
          this.store.redis.hget(keys.weights, clientId).catch(() => null),
          this.store.redis.hget(keys.rates, clientId).catch(() => null),
          this.store.redis.hget(keys.rates, '*').catch(() => null),
        ]);
        const rate = Number(own ?? all ?? 0);
        return {
          clientId,
          state,
          pending: listed + prioritized,
          inFlight: Number(inFlight) || 0,
          weight: Number(weight) || 1,
          rateLimit: rate > 0 ? rate : null,
        };
      }),
    );
    return { clients, clientConcurrency: cap > 0 ? cap : null, total: position, offset };
  }

  /** What a worker is running in a pattern (its processing hash; at most `limit` tasks). */
  async running(pattern: string, group: string, workerId: string, limit = 100): Promise<RunningTask[]> {
    const tasks: RunningTask[] = [];
    for (const shard of (await this.layout(pattern)).shards) {
      const held = await this.store.redis.hvals(shard.forGroup(group).processing(workerId)).catch(() => [] as string[]);
      for (const raw of held.slice(0, limit - tasks.length)) {
        const decoded = decodeEntry(raw);
        if (decoded.ok) {
          const { envelope, attempts } = decoded.entry;
          tasks.push({
            id: envelope.id,
            clientId: envelope.clientId,
            attempt: attempts + 1,
            enqueuedAt: envelope.enqueuedAt ?? null,
          });
        } else {
          tasks.push({ id: '(undecodable)', clientId: '?', attempt: 0, enqueuedAt: null });
        }
      }
    }
    return tasks;
  }

  private async layout(pattern: string): Promise<QueueLayout> {
    const known = this.known.get(pattern);
    if (known) return known;
    const layout = await this.store.layouts.layout(pattern);
    this.known.set(pattern, layout);
    return layout;
  }
}

/** One pattern and group, its shards' replies added up; the per-minute rates from the recorded counters. */
function summarize(
  pattern: string,
  group: string,
  shards: number,
  replies: readonly GroupReply[],
  now: number,
): PatternOverview {
  const sum = (field: number) => replies.reduce((total, reply) => total + (reply[field] as number), 0);
  const oldest = replies.map((reply) => reply[9]).filter((at) => at >= 0);
  const exact = replies.every((reply) => reply[10] >= reply[2]);
  const counters = {
    completed: sum(11),
    failed: sum(12),
    retried: sum(13),
    deadLettered: sum(14),
    cancelled: sum(16),
    replaced: sum(17),
  };
  const perMinute = new Map<number, { completed: number; failed: number; deadLettered: number; partial?: boolean }>();
  for (const reply of replies) {
    const current = { at: now, completed: reply[11], failed: reply[12], deadLettered: reply[14] };
    for (const rate of ratesOf(reply[15], current)) {
      const known = perMinute.get(rate.at) ?? { completed: 0, failed: 0, deadLettered: 0 };
      perMinute.set(rate.at, {
        completed: known.completed + rate.completed,
        failed: known.failed + rate.failed,
        deadLettered: known.deadLettered + rate.deadLettered,
        ...(rate.partial ? { partial: true } : {}),
      });
    }
  }
  return {
    pattern,
    group,
    shards,
    pending: sum(1),
    clientsWaiting: sum(2),
    inFlight: sum(8),
    delayed: sum(3),
    deadLetters: sum(4),
    paused: replies.some((reply) => reply[5] === 1),
    workers: sum(6),
    workersAlive: sum(7),
    state: patternState({ paused: replies.some((reply) => reply[5] === 1), workersAlive: sum(7) }),
    oldestWaitingAgeMs: oldest.length === 0 ? null : Math.max(0, now - Math.min(...oldest)),
    oldestExact: exact,
    counters,
    perMinute: [...perMinute].sort(([a], [b]) => a - b).map(([at, rate]) => ({ at, ...rate })),
  };
}

/**
 * Completed, failed and dead-lettered tasks per minute from a shard's history (minute -> "<ms> <completed>
 * <failed> <retried> <deadLettered>"):
 * the difference between the counters recorded in consecutive minutes (reapers record them at their
 * first sweep of each minute), and for the minute under way, what was counted since its record (marked
 * `partial`).
 */
export function ratesOf(
  history: readonly string[],
  current: { at: number; completed: number; failed: number; deadLettered: number },
): MinuteRate[] {
  const points: { at: number; completed: number; failed: number; deadLettered: number }[] = [];
  for (let i = 0; i + 1 < history.length; i += 2) {
    const [at, completed, failed, , dead] = history[i + 1].split(' ').map(Number);
    // A record without its dead-letter count (none older than this release wrote one) counts none.
    const deadLettered = Number.isFinite(dead) ? dead : 0;
    if ([at, completed, failed].every(Number.isFinite)) points.push({ at, completed, failed, deadLettered });
  }
  points.sort((a, b) => a.at - b.at);
  const rates: MinuteRate[] = [];
  for (let i = 0; i < points.length; i++) {
    const from = points[i];
    const to = points[i + 1] ?? current;
    if (to.at < from.at) continue;
    const completed = Math.max(0, to.completed - from.completed);
    const failed = Math.max(0, to.failed - from.failed);
    const deadLettered = Math.max(0, to.deadLettered - from.deadLettered);
    const start = Math.floor(from.at / 60_000);
    // Records more than a minute apart (no reaper ran in between): what the gap counted is spread over its
    // minutes, not drawn as one minute holding all of it.
    const minutes = i + 1 === points.length ? 1 : Math.max(1, Math.floor(to.at / 60_000) - start);
    for (let m = 0; m < minutes; m++) {
      rates.push({
        at: (start + m) * 60_000,
        completed: completed / minutes,
        failed: failed / minutes,
        deadLettered: deadLettered / minutes,
        ...(i + 1 === points.length ? { partial: true } : {}),
        ...(minutes > 1 ? { spread: true } : {}),
      });
    }
  }
  return rates;
}
