import { ShardCountMismatchError } from '../model/errors.js';
import { checkClusterLayout } from './guardrails.js';
import type { TaskLogger } from '../support/logger.js';
import { DEFAULT_GROUP, type PrefixKeys, type QueueLayout } from './keys.js';
import { gatewayOf } from './gateway.js';
import type { TaskRedis } from './scripts.js';

/** How long a `'recorded'` layout keeps a count it read (a queue removed and made again with another count is followed after this). */
const RECORD_KEPT_MS = 60_000;

/**
 * The shard layout of each queue. A producer or worker (`configured` count) records its count the
 * first time a queue is used and is refused when Redis holds another; a reaper or admin tool
 * (`'recorded'`) follows whatever count Redis holds. On a Cluster, the first check of a queue also
 * checks its key layout against the cluster (see `checkClusterLayout`).
 */
export class QueueLayouts {
  // table-ok: one entry per queue
  private readonly verified = new Map<string, QueueLayout>();
  // table-ok: one entry per queue being checked
  private readonly checking = new Map<string, Promise<QueueLayout>>();
  /** Counts on record read lately (`'recorded'` layouts), kept RECORD_KEPT_MS. */
  // table-ok: one entry per queue
  private readonly read = new Map<string, { layout: QueueLayout; at: number }>();

  constructor(
    private readonly redis: TaskRedis,
    /** The key names of the prefix the layouts are under. */
    readonly keys: PrefixKeys,
    private readonly configured: number | 'recorded',
    /** Where the Cluster layout check (made with the first check of each queue) logs. */
    private readonly logger?: TaskLogger,
    /** The consumer group whose keys the layouts name. */
    private readonly group = DEFAULT_GROUP,
  ) {}

  /** The set of every pattern used under the prefix. */
  get queuesKey(): string {
    return this.keys.queues;
  }

  /** The key prefix the layouts are under. */
  get prefix(): string {
    return this.keys.prefix;
  }

  /** The layout of a queue; a configured count is checked against Redis once per process and queue. */
  layout(queue: string): QueueLayout | Promise<QueueLayout> {
    const known = this.verified.get(queue);
    if (known) {
      return known;
    }
    if (this.configured === 'recorded') {
      return this.recorded(queue);
    }
    let checking = this.checking.get(queue);
    if (!checking) {
      checking = this.verify(queue, this.configured).finally(() => this.checking.delete(queue));
      this.checking.set(queue, checking);
    }
    return checking;
  }

  /**
   * The layouts of several queues (a worker's patterns). Every count on record is read first, so a
   * process refused for one queue records nothing for the others.
   */
  async layouts(queues: readonly string[]): Promise<QueueLayout[]> {
    if (this.configured !== 'recorded') {
      for (const queue of queues.filter((name) => !this.verified.has(name))) {
        const recorded = await this.redis.get(this.keys.shardCount(queue));
        if (recorded !== null && Number(recorded) !== this.configured) {
          throw new ShardCountMismatchError(queue, Number(recorded), this.configured, this.keys.shardCount(queue));
        }
      }
    }
    return Promise.all(queues.map(async (queue) => this.layout(queue)));
  }

  /**
   * The layout of a queue as on record, or undefined while none is (no producer or worker has used it): for
   * those that must never decide a queue's shard count (a schedule's ticks).
   */
  async onRecord(queue: string): Promise<QueueLayout | undefined> {
    const known = this.verified.get(queue);
    if (known) return known;
    const recorded = await this.redis.get(this.keys.shardCount(queue));
    if (recorded === null) return undefined;
    const count = Number(recorded);
    return this.keys.layout(queue, Number.isInteger(count) && count >= 1 ? count : 1, this.group);
  }

  private async verify(queue: string, configured: number): Promise<QueueLayout> {
    const recorded = await this.record(queue, configured);
    if (recorded !== configured) {
      throw new ShardCountMismatchError(queue, recorded, configured, this.keys.shardCount(queue));
    }
    const layout = this.keys.layout(queue, configured, this.group);
    if (this.logger) {
      await checkClusterLayout(this.redis, layout, this.logger);
    }
    this.verified.set(queue, layout);
    return layout;
  }

  private async recorded(queue: string): Promise<QueueLayout> {
    const kept = this.read.get(queue);
    if (kept && Date.now() - kept.at < RECORD_KEPT_MS) return kept.layout;
    const recorded = await this.redis.get(this.keys.shardCount(queue));
    const count = Number(recorded ?? 1);
    const layout = this.keys.layout(queue, Number.isInteger(count) && count >= 1 ? count : 1, this.group);
    // A count on record does not change while the queue lives: kept a while (a reaper's turns read many).
    if (recorded !== null) this.read.set(queue, { layout, at: Date.now() });
    return layout;
  }

  private record(queue: string, count: number): Promise<number> {
    return gatewayOf(this.redis).recordShardCount(this.keys, queue, count);
  }
}
