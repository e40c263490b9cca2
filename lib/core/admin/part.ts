import { DEFAULT_GROUP, type PrefixKeys, type QueueKeys } from '../redis/keys.js';
import type { QueueLayouts } from '../redis/layouts.js';
import type { TaskRedis } from '../redis/scripts.js';
import type { TaskStore } from '../redis/store.js';

/** What every part of the admin API works with: the prefix's store (connection, keys, layouts), one consumer group. */
export abstract class AdminPart {
  protected readonly redis: TaskRedis;
  protected readonly keys: PrefixKeys;
  protected readonly layouts: QueueLayouts;

  constructor(
    protected readonly store: TaskStore,
    /** The consumer group whose copies this part reads and changes. */
    readonly group = DEFAULT_GROUP,
  ) {
    this.redis = store.redis;
    this.keys = store.keys;
    this.layouts = store.layouts;
  }

  /** Redis's clock (ms): leases and due times are on it. */
  protected async redisNow(): Promise<number> {
    const [seconds, micros] = await this.redis.time();
    return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
  }

  /** The queue's shards (the count on record in Redis), as this group's keys. */
  protected async shards(queue: string): Promise<readonly QueueKeys[]> {
    return (await this.layouts.layout(queue)).shards.map((shard) => shard.forGroup(this.group));
  }
}
