import { DEFAULT_GROUP, type PrefixKeys, type QueueKeys } from '../redis/keys.js';
import type { QueueLayouts } from '../redis/layouts.js';
import type { TaskRedis } from '../redis/scripts.js';
import type { TaskStore } from '../redis/store.js';
import type { ScriptGateway } from '../redis/gateway.js';

/** What every part of the admin API works with: the prefix's store (connection, keys, layouts), one consumer group. */
export abstract class AdminPart {
  constructor(
    protected readonly store: TaskStore,
    /** The consumer group whose copies this part reads and changes. */
    readonly group = DEFAULT_GROUP,
  ) {}

  /** The store's connection. */
  protected get redis(): TaskRedis {
    return this.store.redis;
  }

  /** The store's key names. */
  protected get keys(): PrefixKeys {
    return this.store.keys;
  }

  /** The store's layouts (shard counts on record). */
  protected get layouts(): QueueLayouts {
    return this.store.layouts;
  }

  /** The store's script gateway. */
  protected get gateway(): ScriptGateway {
    return this.store.gateway;
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
