import { eachOf } from '../support/each-of.js';
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { decodeEntry, guessTaskId, type DecodeFailure } from '../model/codec.js';
import { undecodableRecord } from '../model/dead-letter.js';
import type { ScriptGateway } from '../redis/gateway.js';
import { reaperSettings } from '../config/options.js';
import { DEFAULT_GROUP, type PrefixKeys, type QueueKeys } from '../redis/keys.js';
import type { TaskLogger } from '../support/logger.js';
import { requeueProcessing } from '../redis/requeue.js';
import type { QueueLayouts } from '../redis/layouts.js';
import { TaskStore } from '../redis/store.js';
import { RingAudit } from './ring-audit.js';
import { BatchFolder } from '../batches/batch-folder.js';
import { FlowFolder } from '../flows/flow-folder.js';
import { isRedisFull } from '../redis/refusals.js';
import { SweepTurns, type Slice } from './sweep-turns.js';
import type { TaskRedis } from '../redis/scripts.js';

/** What one sweep did. */
export interface SweepResult {
  /** Tasks returned from dead workers' processing hashes to their lists. */
  recovered: number;
  /** Due delayed tasks (retries) moved to their lists. */
  promoted: number;
  /** Entries found malformed while recovering or promoting, moved to dead letters. */
  deadLettered: number;
  /** Dead workers whose registration was removed. */
  workersRemoved: number;
  /** Clients whose pending tasks no claim could reach, put back on their ring (see RingAudit). */
  rejoined?: number;
  /** Earliest due time left in the delayed sets swept (ms, Redis clock), if any. */
  nextDueAt?: number;
}

export interface ReaperOptions {
  /** Longest time one process may hold the right to recover a queue's dead workers (ms). */
  readonly lockMs: number;
  readonly deadLetterCap: number;
  readonly resultTtlMs: number;
}

const PROMOTE_BATCH = 500;
/**
 * Recovers tasks of dead workers (their lease expired) and promotes due retries. Safe in any number of
 * processes at once: recovery of a queue is taken in turn through a short lock (no stampede), and
 * every move is a script that moves only what is still there (no double recovery or promotion).
 */
export class TaskReaper {
  private readonly owner = randomBytes(8).toString('hex');
  private readonly gateway: ScriptGateway;
  private readonly audit: RingAudit;
  /** Folds batch tasks' settles into their batches (and enqueues the callbacks of those that completed). */
  private readonly batches: BatchFolder;
  /** Folds flow nodes' settles into their flows (releasing their children, stopping, enqueueing callbacks). */
  private readonly flows: FlowFolder;
  /** The minute each shard's counters were last recorded in (by this reaper). */
  private readonly snapshotted = new Map<string, number>();
  private offsetMs = 0;
  /** This process's side of the deployment's sweep turns. */
  private readonly turns: SweepTurns;

  private readonly redis: TaskRedis;
  private readonly keys: PrefixKeys;
  private readonly layouts: QueueLayouts;

  constructor(
    store: TaskStore,
    private readonly options: ReaperOptions,
    private readonly logger?: TaskLogger,
  ) {
    this.redis = store.redis;
    this.keys = store.keys;
    this.layouts = store.layouts;
    this.gateway = store.gateway;
    this.audit = new RingAudit(this.redis, this.gateway);
    this.batches = new BatchFolder(store, logger);
    this.flows = new FlowFolder(store, logger);
    this.turns = new SweepTurns(store.gateway.sweeps, store.keys, this.owner);
  }

  /** Redis clock minus this process's clock, as last measured by a sweep (due times are on the Redis clock). */
  get clockOffsetMs(): number {
    return this.offsetMs;
  }

  /**
   * A standalone reaper of a prefix (RedisTaskReaper): it follows each queue's shard count on record,
   * so one reaper serves sharded and unsharded queues, with the default settings.
   */
  static forPrefix(redis: TaskRedis, prefix: string, logger?: TaskLogger): TaskReaper {
    return new TaskReaper(TaskStore.recorded(redis, prefix), reaperSettings(), logger);
  }

  /**
   * Sweeps (every shard of) the given queues, or every queue a worker ever registered under this prefix;
   * with `slice`, only its shards (a deployment's turn: see sweepInTurn).
   */
  async sweep(queues?: readonly string[], slice?: Slice): Promise<SweepResult> {
    const names = queues ?? (await this.redis.smembers(this.keys.queues));
    const total: SweepResult = { recovered: 0, promoted: 0, deadLettered: 0, workersRemoved: 0 };
    // One clock reading for the sweep: a little behind by its last shard, which only finds a lease expired later.
    const now = await this.now();
    // A shard whose sweep fails leaves the others swept (and the due checks made); the first failure is thrown after.
    const failed = await eachOf(await this.shards(names, slice), async (keys) =>
      addSweep(total, await this.sweepQueue(keys, now)),
    ).then(
      () => undefined,
      (error: unknown) => ({ error }),
    );
    const later = await this.now();
    // The batches' and flows' due checks, each whatever the other's does.
    await eachOf<{ checkDue(now: number): Promise<void> }>([this.batches, this.flows], (due) => due.checkDue(later));
    if (failed) throw failed.error;
    return total;
  }

  /**
   * The deployment's periodic sweep: the process whose turn it is (SweepTurns) sweeps its slice of the
   * prefix's shards; the others do nothing (undefined).
   */
  async sweepInTurn(intervalMs: number): Promise<SweepResult | undefined> {
    const slice = await this.turns.take(intervalMs);
    return slice ? this.sweep(undefined, slice) : undefined;
  }

  /** Only promotes due delayed tasks of the given queues (cheap; used on the retry timer). */
  async promote(queues: readonly string[]): Promise<SweepResult> {
    const total: SweepResult = { recovered: 0, promoted: 0, deadLettered: 0, workersRemoved: 0 };
    for (const keys of await this.shards(queues)) {
      const { promoted, deadLettered, nextDueAt } = await this.promoteDue(keys, await this.now());
      total.promoted += promoted;
      total.deadLettered += deadLettered;
      if (nextDueAt !== undefined && (total.nextDueAt === undefined || nextDueAt < total.nextDueAt)) {
        total.nextDueAt = nextDueAt;
      }
    }
    return total;
  }

  /**
   * Every shard of the queues (or those of `slice`), for every consumer group registered on it (and the
   * implicit one).
   */
  private async shards(queues: readonly string[], slice?: Slice): Promise<QueueKeys[]> {
    const layouts = await this.layouts.layouts(queues);
    let all = layouts.flatMap((layout) => layout.shards);
    if (slice !== undefined && all.length > slice.size) {
      // In one order for every process (the queue names sorted), slice n takes shards n * size onwards.
      all.sort((a, b) => (a.base < b.base ? -1 : a.base > b.base ? 1 : 0));
      const start = (slice.index * slice.size) % all.length;
      all = [...all.slice(start), ...all.slice(0, start)].slice(0, slice.size);
    }
    const found: QueueKeys[] = [];
    for (const shard of all) {
      const groups = new Set([DEFAULT_GROUP, shard.group, ...(await this.redis.smembers(shard.groups))]);
      for (const group of groups) found.push(shard.forGroup(group));
    }
    return found;
  }

  /**
   * Takes the queue's recovery lock; false when another reaper holds it. A full Redis refuses the lock's
   * write: then this reaper recovers without it (recovery is fenced and idempotent; the lock only spares
   * reapers doing the same work at once), so a full Redis's dead workers are still recovered.
   */
  private async lock(keys: QueueKeys): Promise<boolean> {
    try {
      return (await this.redis.set(keys.reaperLock, this.owner, 'PX', this.options.lockMs, 'NX')) === 'OK';
    } catch (error) {
      if (isRedisFull(error)) return true;
      throw error;
    }
  }

  private async sweepQueue(keys: QueueKeys, now: number): Promise<SweepResult> {
    const result: SweepResult = { recovered: 0, promoted: 0, deadLettered: 0, workersRemoved: 0 };
    const dead = await this.redis.zrangebyscore(keys.workers, '-inf', now);
    // The lock only keeps reapers from recovering the same queue at the same moment; it is released
    // right after (and expires by itself if this process dies mid-way).
    if (dead.length > 0 && (await this.lock(keys))) {
      try {
        await this.recover(keys, dead, now, result);
      } finally {
        await this.gateway.releaseReaperLock(keys, this.owner);
      }
    }
    const promotion = await this.promoteDue(keys, now);
    // Settle events of batches' and flows' tasks (one read for both while there are none: the idle case).
    if ((await this.redis.exists(keys.batchEvents, keys.flowEvents)) > 0) {
      await this.batches.fold(keys);
      await this.flows.fold(keys);
    }
    await this.snapshot(keys, now);
    for (const { clientId, tasks } of await this.audit.step(keys)) {
      result.rejoined = (result.rejoined ?? 0) + 1;
      this.logger?.warn(
        `client "${clientId}" of "${keys.queue}" had ${tasks} pending task(s) that no worker could reach (its client was off the ring); put it back (recorded in faults)`,
      );
    }
    result.promoted = promotion.promoted;
    result.deadLettered += promotion.deadLettered;
    result.nextDueAt = promotion.nextDueAt;
    return result;
  }

  /** Records the outcome counters once a minute per shard (for per-minute rates: see snapshotCounters). */
  private async snapshot(keys: QueueKeys, now: number): Promise<void> {
    const minute = Math.floor(now / 60_000);
    if (this.snapshotted.get(keys.base) === minute) return;
    await this.gateway.snapshotCounters(keys);
    this.snapshotted.set(keys.base, minute);
  }

  private async recover(keys: QueueKeys, dead: string[], now: number, result: SweepResult): Promise<void> {
    for (const workerId of dead) {
      const settle = { workerId, deadLetterCap: this.options.deadLetterCap, resultTtlMs: this.options.resultTtlMs };
      const { requeued, malformed, alive } = await requeueProcessing(this.redis, keys, settle, {
        countAttempt: true,
        logger: this.logger,
        expiredBy: now,
      });
      if (alive) {
        // It renewed its lease after this sweep found it expired (a long pause, not a death): its tasks stay its own.
        this.logger?.log(
          `worker ${workerId} of "${keys.queue}" renewed its lease during recovery: it is alive, and keeps its tasks`,
        );
        continue;
      }
      result.recovered += requeued;
      result.deadLettered += malformed;
      if (await this.gateway.forgetWorker(keys, workerId, now)) result.workersRemoved++;
      if (requeued > 0) {
        this.logger?.warn(
          `recovered ${requeued} task(s) of "${keys.queue}" from worker ${workerId}, whose lease expired`,
        );
      }
    }
  }

  private async promoteDue(
    keys: QueueKeys,
    now: number,
  ): Promise<Pick<SweepResult, 'promoted' | 'deadLettered' | 'nextDueAt'>> {
    let promoted = 0;
    let deadLettered = 0;
    // Rate-limited clients whose next token is due go back on the ring.
    const { nextDueAt: throttledDue } = await this.gateway.releaseThrottled(keys, now);
    for (;;) {
      const due = await this.redis.zrangebyscore(keys.delayed, '-inf', now, 'LIMIT', 0, PROMOTE_BATCH);
      if (due.length === 0) {
        break;
      }
      const ready: { entry: string; clientId: string; priority: number }[] = [];
      for (const entry of due) {
        const decoded = decodeEntry(entry);
        if (!decoded.ok) {
          deadLettered += await this.deadLetterDelayed(keys, entry, decoded);
          continue;
        }
        const { clientId, priority } = decoded.entry.envelope;
        ready.push({ entry, clientId, priority: priority ?? 0 });
      }
      if (ready.length > 0) {
        promoted += await this.gateway.promote(keys, ready);
      }
      if (due.length < PROMOTE_BATCH) {
        break;
      }
    }
    // The typed method, not call(): only it maps RESP3's nested [member, score] pairs to a flat array.
    const next = await (this.redis as Redis).zrange(keys.delayed, '0', '0', 'WITHSCORES');
    const dues = [next.length === 2 ? Number(next[1]) : undefined, throttledDue].filter((due) => due !== undefined);
    return { promoted, deadLettered, nextDueAt: dues.length > 0 ? Math.min(...dues) : undefined };
  }

  private async deadLetterDelayed(keys: QueueKeys, entry: string, failure: DecodeFailure): Promise<number> {
    const record = undecodableRecord(keys.queue, entry, failure, 'reaper', guessTaskId(entry));
    return (await this.gateway.deadLetterDelayed(keys, entry, JSON.stringify(record), this.options.deadLetterCap))
      ? 1
      : 0;
  }

  private async now(): Promise<number> {
    const [seconds, micros] = await this.redis.time();
    const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
    this.offsetMs = now - Date.now();
    return now;
  }
}

/** Adds one shard's sweep to the sweep's totals. */
function addSweep(total: SweepResult, result: SweepResult): void {
  total.recovered += result.recovered;
  total.promoted += result.promoted;
  total.deadLettered += result.deadLettered;
  total.workersRemoved += result.workersRemoved;
  if (result.rejoined) total.rejoined = (total.rejoined ?? 0) + result.rejoined;
  if (result.nextDueAt !== undefined && (total.nextDueAt === undefined || result.nextDueAt < total.nextDueAt)) {
    total.nextDueAt = result.nextDueAt;
  }
}
