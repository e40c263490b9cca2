import type { QueueKeys, QueueLayout } from './keys.js';
import { isRedisFull } from './refusals.js';
import type { TaskRedis } from './scripts.js';
import type { TaskLogger } from '../support/logger.js';

/** What a worker registers per pattern: its rate limit (`*`) and per-client cap. */
export interface PatternRegistration {
  rateLimit(queue: string): number | null;
  clientConcurrency(queue: string): number;
}

/**
 * The one writer of a queue shard's settings, as the claim script reads them: client weights (absent:
 * 1), rate limits (per client, or `*` for the pattern), the per-client cap, and the pause flag. A worker
 * writes its pattern's settings at start (`TaskWorker.register`); operators change them through the admin
 * API (`QueueSettings`). Values are checked by the callers (config/rules.ts); each write is one command,
 * so calls of one step can go out together.
 */
export class SettingsWriter {
  constructor(
    private readonly redis: TaskRedis,
    private readonly logger?: TaskLogger,
  ) {}

  /**
   * A worker's registration: its group on each shard (every task emitted from now on gets a copy for it),
   * its patterns' rate limits and caps, its client weights, and its patterns in the prefix's list. Only
   * what differs from Redis is written, so a worker restarting (or scaling up) on a full Redis writes
   * nothing and starts: a full Redis is drained by starting workers. A write a full Redis refuses (a new
   * pattern, a changed setting) is logged, and made by the worker's next start.
   */
  async register(
    layouts: readonly QueueLayout[],
    queuesKey: string,
    patterns: PatternRegistration,
    clientWeights: Readonly<Record<string, number>> | undefined,
  ): Promise<void> {
    const writes: Promise<unknown>[] = [];
    const unless = (same: Promise<boolean>, write: () => Promise<unknown>, what: string) =>
      writes.push(
        same.then(async (unchanged) => {
          if (unchanged) return;
          try {
            await write();
          } catch (error) {
            if (!isRedisFull(error)) throw error;
            this.logger?.warn(
              `Redis is full: could not record ${what}; the worker runs without it until its next start`,
            );
          }
        }),
      );
    for (const layout of layouts) {
      const rate = patterns.rateLimit(layout.queue);
      const cap = patterns.clientConcurrency(layout.queue);
      const storedRate = rate === null || rate <= 0 ? null : String(rate);
      for (const keys of layout.shards) {
        unless(
          this.redis.sismember(keys.groups, keys.group).then((member) => member === 1),
          () => this.redis.sadd(keys.groups, keys.group),
          `consumer group "${keys.group}" of "${keys.queue}"`,
        );
        unless(
          this.redis.hget(keys.rates, '*').then((stored) => stored === storedRate),
          () => this.rate(keys, '*', rate),
          `the rate limit of "${keys.queue}"`,
        );
        unless(
          this.redis.get(keys.clientConcurrency).then((stored) => stored === (cap > 0 ? String(cap) : null)),
          () => this.clientConcurrency(keys, cap),
          `the per-client cap of "${keys.queue}"`,
        );
      }
      for (const [clientId, weight] of Object.entries(clientWeights ?? {})) {
        const keys = layout.shardOf(clientId);
        unless(
          this.redis.hget(keys.weights, clientId).then((stored) => stored === (weight === 1 ? null : String(weight))),
          () => this.weight(keys, clientId, weight),
          `the weight of client "${clientId}" on "${keys.queue}"`,
        );
      }
      unless(
        this.redis.sismember(queuesKey, layout.queue).then((member) => member === 1),
        () => this.redis.sadd(queuesKey, layout.queue),
        `pattern "${layout.queue}" in the prefix's list`,
      );
    }
    await Promise.all(writes);
  }

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
