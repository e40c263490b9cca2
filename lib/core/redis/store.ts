import { watchOf, type ConnectionWatch } from './connection.js';
import { gatewayOf, type ScriptGateway } from './gateway.js';
import { PrefixKeys } from './keys.js';
import { QueueLayouts } from './layouts.js';
import { perConnection } from './per-connection.js';
import { defineScripts, type RedisConnection, type TaskRedis } from './scripts.js';

/**
 * What a role reaches one prefix on one connection with, under one name: the connection (its scripts
 * defined), the prefix's key names, the queues' layouts (shard counts), and the script gateway. The
 * worker, the reaper, the admin API and the dashboard take a store, not the four separately.
 *
 * A worker's store follows its configured shard count (`new TaskStore(redis, layouts)`, made by its
 * runtime); the tools' store follows the count on record (`TaskStore.recorded`), made once per connection
 * and prefix and shared by every tool on that connection.
 */
export class TaskStore {
  readonly keys: PrefixKeys;
  readonly gateway: ScriptGateway;

  constructor(
    readonly redis: TaskRedis,
    readonly layouts: QueueLayouts,
  ) {
    this.keys = layouts.keys;
    this.gateway = gatewayOf(redis);
  }

  /** The connection's watch (whether it is ready, since when it is down, whether it was refused). */
  get watch(): ConnectionWatch {
    return watchOf(this.redis);
  }

  /** The store of a prefix on a plain ioredis connection (the CLI's): the package's scripts defined on it first. */
  static onConnection(redis: RedisConnection, prefix: string): TaskStore {
    return TaskStore.recorded(defineScripts(redis), prefix);
  }

  /** The store of a prefix whose shard counts are read from their record in Redis (tools: admin, reaper, dashboard). */
  static recorded(redis: TaskRedis, prefix: string): TaskStore {
    const stores = recordedStores(redis);
    let store = stores.get(prefix);
    if (!store) {
      const keys = new PrefixKeys(prefix);
      store = new TaskStore(redis, new QueueLayouts(redis, keys, 'recorded'));
      stores.set(prefix, store);
    }
    return store;
  }
}

// table-ok: one entry per prefix used on the connection
const recordedStores = perConnection(() => new Map<string, TaskStore>());
