import type { TaskEnvelope } from '../model/codec.js';
import type { HeartbeatCalls, IdleLease } from '../redis/gateway.js';
import { PrefixKeys, type QueueKeys } from '../redis/keys.js';
import { requeueProcessing } from '../redis/requeue.js';
import type { TaskRedis } from '../redis/scripts.js';
import { OutageReporter, type TaskLogger } from '../support/logger.js';
import { loseLease, type Run, type RunEnded, type RunningTasks } from './running.js';
import { revokerOf } from '../model/task-traits.js';
import { heldLeaseMs, type WorkerOptions } from './worker-types.js';

/**
 * A lease ends IDLE_LEASE_FACTOR times later in a shard where the worker holds nothing (see Lease.idleLeaseMs):
 * 4 with the defaults, two minutes, renewed about every 100 s.
 */
const IDLE_LEASE_FACTOR = 4;

/**
 * The worker's lease in every queue shard it consumes, renewed by a heartbeat (a shard with nothing at stake
 * with a longer lease, less often: see `atStake`). Each beat reconciles
 * with Redis: a running task whose token the processing hash lost was recovered by a reaper (this
 * worker's lease had expired), so its handler is told to stop; a token the hash holds that no handler
 * runs, twice in a row, is a claim whose reply never arrived, so it goes back to its queue.
 */
export class Lease {
  private timer: NodeJS.Timeout | undefined;
  private beating: Promise<void> | undefined;
  private beatingSince = 0;
  private readonly outage: OutageReporter;
  /** Tokens seen in a processing hash without a running task at the previous beat, per shard. */
  // table-ok: one entry per queue shard, replaced per heartbeat
  private readonly orphanSuspects = new Map<string, Set<string>>();
  /** When each shard's lease is due for renewal (Date.now()), when nothing is at stake there. */
  // table-ok: one entry per queue shard
  private readonly renewDueAt = new Map<string, number>();
  /** Shards whose claims took tasks since the last beat (bases): their lease was cut to `leaseMs`. */
  // table-ok: one entry per queue shard, cleared per heartbeat
  private claimedSince = new Set<string>();

  constructor(
    private readonly redis: TaskRedis,
    private readonly gateway: HeartbeatCalls,
    private readonly running: RunningTasks,
    /** Tokens whose acknowledgement is queued on a shard's claim loop: still held, so still running. */
    private readonly unacknowledged: (keys: QueueKeys) => readonly string[],
    private readonly options: WorkerOptions,
    private readonly logger: TaskLogger,
    downSince: () => number | undefined,
  ) {
    this.outage = new OutageReporter(logger, 'worker heartbeat', downSince);
  }

  /** The lease written at each beat of a shard with something at stake (see heldLeaseMs). */
  get leaseMs(): number {
    return heldLeaseMs(this.options);
  }

  /**
   * The lease of a shard with nothing at stake: IDLE_LEASE_FACTOR times longer. It guards no task (the claim
   * that takes one cuts it back to `leaseMs`, in the same script), so its length delays nothing's recovery;
   * it only keeps an idle process registered, renewed IDLE_LEASE_FACTOR times less often.
   */
  private get idleLeaseMs(): number {
    return IDLE_LEASE_FACTOR * this.options.leaseMs + this.options.heartbeatIntervalMs;
  }

  /** The idle lease as written: the held one after all if the shard's processing hash holds a task. */
  private get idleLease(): IdleLease {
    return { idle: this.idleLeaseMs, held: this.leaseMs };
  }

  /**
   * Takes (or renews) the lease in a shard without reconciling anything: the idle lease, as the worker holds
   * nothing there yet (its first claim that takes tasks cuts it; a shard with tasks of a run that lost its
   * lease is renewed with `leaseMs` at the next beat).
   */
  async take(keys: QueueKeys): Promise<void> {
    const now = Date.now();
    await this.gateway.heartbeat(keys, this.options.workerId, this.idleLease);
    this.renewDueAt.set(keys.base, this.renewalAfter(now, this.idleLeaseMs, true));
  }

  /**
   * When a lease of `leaseMs` written at `now` is renewed: two beats before it would end, less up to an eighth
   * of that at random. The first renewal after `take` comes anywhere from a beat to that point, at random: the
   * idle shards of a process (and of processes started together) are renewed spread evenly over the period,
   * and stay so, not all in one stretch of it.
   */
  private renewalAfter(now: number, leaseMs: number, first = false): number {
    const beat = this.options.heartbeatIntervalMs;
    const margin = Math.max(beat, leaseMs - 2 * beat);
    return now + (first ? beat + Math.random() * (margin - beat) : margin - (Math.random() * margin) / 8);
  }

  /** A claim took tasks in the shard: the claim cut its lease to `leaseMs`, so the next beat renews it. */
  claimed(keys: QueueKeys): void {
    this.claimedSince.add(keys.base);
  }

  /**
   * Whether a shard has something at stake, renewed at every beat with `leaseMs`: tasks running or awaiting
   * their acknowledgement, tokens suspected orphaned, tasks claimed since the last beat (even if done: the
   * claim cut the lease), or the process's first shard (its pulse: a process taking the same worker id
   * watches its heartbeat). The others are renewed with `idleLeaseMs` when due: an idle process of many
   * patterns writes one heartbeat per interval, not one per pattern.
   */
  private atStake(keys: QueueKeys, index: number, running: readonly string[], claimed: Set<string>): boolean {
    return (
      index === 0 || running.length > 0 || claimed.has(keys.base) || (this.orphanSuspects.get(keys.root)?.size ?? 0) > 0
    );
  }

  /** Beats every `heartbeatIntervalMs` over the shards `shards()` lists, one beat at a time. */
  start(shards: () => readonly QueueKeys[]): void {
    this.timer = setInterval(() => {
      if (this.beating) return;
      this.beatingSince = Date.now();
      this.beating = this.beat(shards()).finally(() => {
        this.beating = undefined;
      });
    }, this.options.heartbeatIntervalMs);
    this.timer.unref();
  }

  /** Stops beating; resolves once a beat under way ended. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.beating;
  }

  /** How long the beat under way has waited for Redis, if one is under way. */
  beatingFor(now: number): number | undefined {
    return this.beating ? now - this.beatingSince : undefined;
  }

  private async beat(shards: readonly QueueKeys[]): Promise<void> {
    const claimed = this.claimedSince;
    this.claimedSince = new Set();
    try {
      for (const [index, keys] of shards.entries()) {
        const running = [...this.running.tokensOf(keys), ...this.unacknowledged(keys)];
        const now = Date.now();
        const atStake = this.atStake(keys, index, running, claimed);
        if (!atStake && now < (this.renewDueAt.get(keys.base) ?? 0)) continue;
        const { lost, orphaned } = await this.gateway.heartbeat(
          keys,
          this.options.workerId,
          atStake ? this.leaseMs : this.idleLease,
          running,
        );
        // Renewed as idle: held tasks (orphaned) make it at stake at the next beat.
        this.renewDueAt.set(keys.base, this.renewalAfter(now, atStake ? this.leaseMs : this.idleLeaseMs));
        for (const token of lost) {
          const run = this.running.find(keys, token);
          if (!run) continue;
          const ended = await this.ended(keys, run.about);
          if (!loseLease(run, ended)) continue;
          if (ended) {
            this.logRevoked(keys, run, ended);
          } else {
            this.logger.warn(
              `lost the lease of a task of "${keys.queue}" (token ${token}); its handler was told to stop`,
            );
          }
        }
        await this.requeueOrphans(keys, orphaned);
      }
      this.outage.succeeded();
    } catch (error) {
      this.outage.failed(error);
    }
  }

  /**
   * A control message `revoke\n<token>\n<c|s>\n<reason | newer id>` (revokeTask, a superseding emit): the run
   * holding that token, if this worker has it, is told at once why; the heartbeat stays the backstop for a
   * message lost to a reconnection (it then finds the token gone, and asks why).
   */
  revoked(keys: QueueKeys, message: string): void {
    const [kind, token, how, detail = ''] = message.split('\n');
    if (kind !== 'revoke' || token === undefined) return;
    const run = this.running.find(keys, token);
    if (!run) return;
    const ended: RunEnded = how === 's' ? { replacedBy: detail } : { reason: detail };
    if (loseLease(run, ended)) this.logRevoked(keys, run, ended);
  }

  private logRevoked(keys: QueueKeys, run: Run, ended: RunEnded): void {
    const id = run.about?.id ?? `(token ${run.token})`;
    const why =
      'reason' in ended
        ? `cancelled${ended.reason ? ` (${ended.reason})` : ''}`
        : `superseded by task ${ended.replacedBy}`;
    this.logger.log(`task ${id} of "${keys.queue}" was ${why}; its handler was told to stop`);
  }

  /**
   * A run whose token was revoked, not recovered: a tracked task cancelled (its index says so, with the
   * reason), or a task of a superseding coalescing key whose key has a newer task (supersede revokes the
   * running one; a recovery would have found the newer one too, and dropped it).
   */
  private async ended(keys: QueueKeys, about: TaskEnvelope | undefined): Promise<RunEnded | undefined> {
    const revoker = about && revokerOf(about);
    if (!about || !revoker) return undefined;
    if (revoker === 'supersede') {
      const last = await this.redis.hget(keys.coalesce(about.coalesce ?? ''), 'last').catch(() => null);
      return last === about.id ? undefined : { replacedBy: last ?? 'a newer task' };
    }
    if (revoker === 'batch-cancel') {
      const record = new PrefixKeys(keys.prefix).batch(about.batch ?? '').record;
      const state = await this.redis.hget(record, 'state').catch(() => null);
      return state === 'cancelled' ? { reason: `its batch ${about.batch} was cancelled` } : undefined;
    }
    const [state, reason] = await this.redis.hmget(keys.task(about.id), 'state', 'reason').catch(() => [null, null]);
    return state === 'cancelled' ? { reason: reason ?? '' } : undefined;
  }

  private async requeueOrphans(keys: QueueKeys, orphaned: string[]): Promise<void> {
    const previous = this.orphanSuspects.get(keys.root) ?? new Set<string>();
    const confirmed = orphaned.filter((token) => previous.has(token));
    this.orphanSuspects.set(keys.root, new Set(orphaned.filter((token) => !previous.has(token))));
    if (confirmed.length > 0) {
      const { requeued } = await requeueProcessing(this.redis, keys, this.options, {
        countAttempt: false,
        tokens: confirmed,
        logger: this.logger,
      });
      this.logger.warn(`returned ${requeued} task(s) of "${keys.queue}" whose claim reply was lost to their queue`);
    }
  }
}
