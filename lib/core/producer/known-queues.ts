import type { QueueLayout } from '../redis/keys.js';
import type { QueueLayouts } from '../redis/layouts.js';
import type { TaskRedis } from '../redis/scripts.js';

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
        await this.redis.sadd(this.layouts.queuesKey, queue);
        this.known.set(queue, layout);
        return layout;
      })().finally(() => this.learning.delete(queue));
      this.learning.set(queue, learning);
    }
    return learning;
  }
}
