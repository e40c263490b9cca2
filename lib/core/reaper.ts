import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { decodeEntry, guessTaskId } from './codec.js';
import type { DeadLetterRecord } from './dead-letter.js';
import type { PrefixKeys, QueueKeys } from './keys.js';
import type { TaskLogger } from './logger.js';
import { requeueProcessing } from './requeue.js';
import type { TaskRedis } from './scripts.js';

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

  constructor(
    private readonly redis: TaskRedis,
    private readonly keys: PrefixKeys,
    private readonly options: ReaperOptions,
    private readonly logger?: TaskLogger,
  ) {}

  /** Sweeps the given queues, or every queue a worker ever registered under this prefix. */
  async sweep(queues?: readonly string[]): Promise<SweepResult> {
    const names = queues ?? (await this.redis.smembers(this.keys.queues));
    const total: SweepResult = { recovered: 0, promoted: 0, deadLettered: 0, workersRemoved: 0 };
    for (const queue of names) {
      const result = await this.sweepQueue(this.keys.queue(queue));
      total.recovered += result.recovered;
      total.promoted += result.promoted;
      total.deadLettered += result.deadLettered;
      total.workersRemoved += result.workersRemoved;
      if (result.nextDueAt !== undefined && (total.nextDueAt === undefined || result.nextDueAt < total.nextDueAt)) {
        total.nextDueAt = result.nextDueAt;
      }
    }
    return total;
  }

  /** Only promotes due delayed tasks of the given queues (cheap; used on the retry timer). */
  async promote(queues: readonly string[]): Promise<SweepResult> {
    const total: SweepResult = { recovered: 0, promoted: 0, deadLettered: 0, workersRemoved: 0 };
    for (const queue of queues) {
      const keys = this.keys.queue(queue);
      const { promoted, deadLettered, nextDueAt } = await this.promoteDue(keys, await this.now());
      total.promoted += promoted;
      total.deadLettered += deadLettered;
      if (nextDueAt !== undefined && (total.nextDueAt === undefined || nextDueAt < total.nextDueAt)) {
        total.nextDueAt = nextDueAt;
      }
    }
    return total;
  }

  private async sweepQueue(keys: QueueKeys): Promise<SweepResult> {
    const now = await this.now();
    const result: SweepResult = { recovered: 0, promoted: 0, deadLettered: 0, workersRemoved: 0 };
    const dead = await this.redis.zrangebyscore(keys.workers, '-inf', now);
    // The lock only keeps reapers from recovering the same queue at the same moment; it is released
    // right after (and expires by itself if this process dies mid-way).
    if (dead.length > 0 && (await this.redis.set(keys.reaperLock, this.owner, 'PX', this.options.lockMs, 'NX')) === 'OK') {
      try {
        await this.recover(keys, dead, now, result);
      } finally {
        await this.redis.releaseLock(keys.reaperLock, this.owner);
      }
    }
    const promotion = await this.promoteDue(keys, now);
    result.promoted = promotion.promoted;
    result.deadLettered += promotion.deadLettered;
    result.nextDueAt = promotion.nextDueAt;
    return result;
  }

  private async recover(keys: QueueKeys, dead: string[], now: number, result: SweepResult): Promise<void> {
    {
      for (const workerId of dead) {
        const settle = { workerId, deadLetterCap: this.options.deadLetterCap, resultTtlMs: this.options.resultTtlMs };
        const { requeued, malformed } = await requeueProcessing(this.redis, keys, settle, { countAttempt: true, logger: this.logger });
        result.recovered += requeued;
        result.deadLettered += malformed;
        result.workersRemoved += await this.redis.forgetWorker(keys.workers, keys.processing(workerId), workerId, now);
        if (requeued > 0) {
          this.logger?.warn(`recovered ${requeued} task(s) of "${keys.queue}" from worker ${workerId}, whose lease expired`);
        }
      }
    }
  }

  private async promoteDue(keys: QueueKeys, now: number): Promise<Pick<SweepResult, 'promoted' | 'deadLettered' | 'nextDueAt'>> {
    let promoted = 0;
    let deadLettered = 0;
    for (;;) {
      const due = await this.redis.zrangebyscore(keys.delayed, '-inf', now, 'LIMIT', 0, PROMOTE_BATCH);
      if (due.length === 0) {
        break;
      }
      const pendingKeys: string[] = [];
      const index = new Map<string, number>();
      const triples: (string | number)[] = [];
      for (const entry of due) {
        const decoded = decodeEntry(entry);
        if (!decoded.ok) {
          deadLettered += await this.deadLetterDelayed(keys, entry, decoded.reason);
          continue;
        }
        const { clientId } = decoded.entry.envelope;
        let keyIndex = index.get(clientId);
        if (keyIndex === undefined) {
          pendingKeys.push(keys.pending(clientId));
          keyIndex = pendingKeys.length + 2;
          index.set(clientId, keyIndex);
        }
        triples.push(entry, keyIndex, clientId);
      }
      if (triples.length > 0) {
        promoted += await this.redis.promoteTasks(2 + pendingKeys.length, keys.delayed, keys.ring, ...pendingKeys, ...triples);
      }
      if (due.length < PROMOTE_BATCH) {
        break;
      }
    }
    // The typed method, not call(): only it maps RESP3's nested [member, score] pairs to a flat array.
    const next = await (this.redis as Redis).zrange(keys.delayed, '0', '0', 'WITHSCORES');
    return { promoted, deadLettered, nextDueAt: next.length === 2 ? Number(next[1]) : undefined };
  }

  private async deadLetterDelayed(keys: QueueKeys, entry: string, reason: string): Promise<number> {
    const record: DeadLetterRecord = {
      id: guessTaskId(entry),
      pattern: keys.queue,
      reason: 'malformed',
      detail: reason,
      attempts: 0,
      deadAt: Date.now(),
      workerId: 'reaper',
      raw: entry,
    };
    const results = await this.redis
      .multi()
      .zrem(keys.delayed, entry)
      .lpush(keys.deadLetters, JSON.stringify(record))
      .ltrim(keys.deadLetters, 0, this.options.deadLetterCap - 1)
      .exec();
    const removed = results?.[0]?.[1] === 1;
    if (!removed) {
      // Someone else moved it first: undo our copy.
      await this.redis.lrem(keys.deadLetters, 1, JSON.stringify(record));
    }
    return removed ? 1 : 0;
  }

  private async now(): Promise<number> {
    const [seconds, micros] = await this.redis.time();
    return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
  }
}

/**
 * Runs a reaper on an interval, and promotes retries at their due time in between (a timer set for
 * the earliest due time seen), so a retry does not wait for the next interval.
 */
export class ReaperSchedule {
  private interval: NodeJS.Timeout | undefined;
  private dueTimer: NodeJS.Timeout | undefined;
  private dueAt: number | undefined;
  private running: Promise<unknown> | undefined;
  private stopped = false;

  constructor(
    private readonly reaper: TaskReaper,
    private readonly intervalMs: number,
    private readonly queues: () => readonly string[] | undefined,
    private readonly logger?: TaskLogger,
  ) {}

  start(): void {
    this.interval = setInterval(() => void this.run(() => this.reaper.sweep(this.queues())), this.intervalMs);
    this.interval.unref();
    void this.run(() => this.reaper.sweep(this.queues()));
  }

  /** A retry is due at `dueAt` (Redis clock, ms): promote it then rather than at the next interval. */
  wakeAt(dueAt: number, now = Date.now()): void {
    if (this.stopped || (this.dueAt !== undefined && this.dueAt <= dueAt)) {
      return;
    }
    clearTimeout(this.dueTimer);
    this.dueAt = dueAt;
    this.dueTimer = setTimeout(
      () => {
        this.dueAt = undefined;
        const queues = this.queues();
        void this.run(() => (queues ? this.reaper.promote(queues) : this.reaper.sweep()));
      },
      Math.max(0, dueAt - now),
    );
    this.dueTimer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.interval);
    clearTimeout(this.dueTimer);
    await this.running;
  }

  private async run(work: () => Promise<SweepResult>): Promise<void> {
    if (this.stopped) {
      return;
    }
    const previous = this.running;
    const current = (async () => {
      await previous;
      if (this.stopped) return;
      try {
        const result = await work();
        if (result.nextDueAt !== undefined) {
          this.wakeAt(result.nextDueAt);
        }
      } catch (error) {
        this.logger?.error(`reaper sweep failed: ${(error as Error).message}`);
      }
    })();
    this.running = current;
    await current;
  }
}
