import type { QueueKeys } from './keys.js';
import type { TaskRedis } from './scripts.js';

/**
 * The one writer of a queue shard's settings, as the claim script reads them: client weights (absent:
 * 1), rate limits (per client, or `*` for the pattern), the per-client cap, and the pause flag. A worker
 * writes its pattern's settings at start (`TaskWorker.register`); operators change them through the admin
 * API (`QueueSettings`). Values are checked by the callers (config/rules.ts); each write is one command,
 * so calls of one step can go out together.
 */
export class SettingsWriter {
  constructor(private readonly redis: TaskRedis) {}

  /** A client's claim weight; 1 (the default) removes it. */
  weight(keys: QueueKeys, clientId: string, weight: number): Promise<unknown> {
    return weight === 1 ? this.redis.hdel(keys.weights, clientId) : this.redis.hset(keys.weights, clientId, weight);
  }

  /** Tasks per second a client may start (`*`: every client of the pattern); null (or 0 for `*`) removes it. */
  rate(keys: QueueKeys, clientId: string | '*', rate: number | null): Promise<unknown> {
    return rate === null || (clientId === '*' && rate <= 0)
      ? this.redis.hdel(keys.rates, clientId)
      : this.redis.hset(keys.rates, clientId, rate);
  }

  /** The per-client cap on tasks in flight; 0 removes it. */
  clientConcurrency(keys: QueueKeys, cap: number): Promise<unknown> {
    return cap > 0 ? this.redis.set(keys.clientConcurrency, cap) : this.redis.del(keys.clientConcurrency);
  }

  /** Workers stop claiming from the shard (running tasks finish; producers still enqueue). */
  pause(keys: QueueKeys): Promise<unknown> {
    return this.redis.set(keys.paused, String(Date.now()));
  }

  /** Workers claim from the shard again; blocked loops are told at once on its control channel. */
  async resume(keys: QueueKeys): Promise<void> {
    await this.redis.del(keys.paused);
    await this.redis.publish(keys.controlChannel, 'resume');
  }
}
