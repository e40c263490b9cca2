import type { QueueLayout } from '../redis/keys.js';
import type { QueueLayouts } from '../redis/layouts.js';
import type { TaskRedis } from '../redis/scripts.js';
import type { TaskLogger } from '../support/logger.js';

/**
 * The queues a producer has enqueued to: each one's layout verified against the shard count on record,
 * and the pattern recorded in the prefix's list (admin tools list a pattern that has tasks but never had a
 * worker: a misspelt pattern is otherwise invisible). Once per queue and producer; concurrent first calls
 * share the one check.
 */
export class KnownQueues {
  /** Queues whose layout is verified and which are recorded in the prefix's list of patterns. */
  // table-ok: one entry per queue
  private readonly known = new Map<string, QueueLayout>();
  // table-ok: one entry per queue being learnt
  private readonly learning = new Map<string, Promise<QueueLayout>>();

  constructor(
    private readonly redis: TaskRedis,
    private readonly layouts: QueueLayouts,
    private readonly logger?: TaskLogger,
  ) {}

  /** The queue's layout, if it is known already (no promise: the hot path asks this). */
  get(queue: string): QueueLayout | undefined {
    return this.known.get(queue);
  }

  /** Verifies a queue's layout and records the pattern, once (concurrent calls share it). */
  learn(queue: string): QueueLayout | Promise<QueueLayout> {
    const known = this.known.get(queue);
    if (known) return known;
    let learning = this.learning.get(queue);
    if (!learning) {
      learning = (async () => {
        const layout = await this.layouts.layout(queue);
        const [, consumed] = await Promise.all([
          this.redis.sadd(this.layouts.queuesKey, queue),
          this.redis.exists(layout.shards[0].groups),
        ]);
        if (consumed === 0) void this.warnUnconsumed(queue);
        this.known.set(queue, layout);
        return layout;
      })().finally(() => this.learning.delete(queue));
      this.learning.set(queue, learning);
    }
    return learning;
  }

  /**
   * No worker of any group ever registered for the pattern on this prefix (its groups set, written by each
   * worker's start, is empty): its tasks wait until one does. Said once per pattern and producer, with the
   * consumed patterns whose names are closest (a misspelt `avatar.resise`).
   */
  private async warnUnconsumed(queue: string): Promise<void> {
    if (!this.logger) return;
    const patterns = await this.redis.smembers(this.layouts.queuesKey).catch(() => [] as string[]);
    const consumed: string[] = [];
    for (const pattern of patterns) {
      if (pattern === queue) continue;
      const layout = await this.layouts.onRecord(pattern).catch(() => undefined);
      if (layout && (await this.redis.exists(layout.shards[0].groups).catch(() => 0)) === 1) consumed.push(pattern);
    }
    const near = consumed
      .map((pattern) => ({ pattern, distance: editDistance(pattern, queue) }))
      .filter(({ distance }) => distance <= Math.max(2, Math.floor(queue.length / 4)))
      .sort((a, b) => a.distance - b.distance)
      .slice(0, 3)
      .map(({ pattern }) => JSON.stringify(pattern));
    this.logger.warn(
      `no worker has ever consumed "${queue}" on this prefix: its tasks wait until one registers for it` +
        (near.length > 0 ? ` (did you mean ${near.join(' or ')}?)` : ' (a misspelt pattern?)'),
    );
  }
}

/** Levenshtein distance of two short strings (pattern names). */
function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = current;
  }
  return previous[b.length];
}
