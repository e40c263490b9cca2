import { validateGroup } from '../config/rules.js';
import { AdminPart } from './part.js';
import { keysStartingWith } from './prefix-cleanup.js';

/** What removing a consumer group deleted. */
export interface RemovedGroup {
  readonly pending: number;
  readonly delayed: number;
  /** Copies its workers held. */
  readonly inFlight: number;
  readonly deadLetters: number;
}

const CHUNK = 500;

/** Consumer groups of a pattern: list them, remove one with its copies. */
export class ConsumerGroups extends AdminPart {
  /** Consumer groups registered on a pattern (each gets a copy of every task). */
  async groups(queue: string): Promise<string[]> {
    const names = new Set<string>();
    for (const keys of await this.shards(queue)) {
      for (const name of await this.redis.smembers(keys.groups)) names.add(name);
    }
    return [...names].sort();
  }

  /**
   * Unregisters a consumer group from a pattern and deletes its copies: pending, delayed, held by its
   * workers, and its dead letters. Stop the group's workers first (a running one registers it again).
   */
  async removeGroup(queue: string, group: string): Promise<RemovedGroup> {
    validateGroup('group', group);
    const removed = { pending: 0, delayed: 0, inFlight: 0, deadLetters: 0 };
    for (const shard of (await this.layouts.layout(queue)).shards) {
      const keys = shard.forGroup(group);
      await this.redis.srem(keys.groups, group);
      const clients = new Set([
        ...(await this.redis.lrange(keys.ring, 0, -1)),
        ...(await this.redis.smembers(keys.parked)),
        ...(await this.redis.zrange(keys.throttled, '0', '-1')),
      ]);
      const doomed: string[] = [];
      for (const clientId of clients) {
        removed.pending +=
          (await this.redis.llen(keys.pending(clientId))) + (await this.redis.zcard(keys.priority(clientId)));
        doomed.push(keys.pending(clientId), keys.priority(clientId));
      }
      for (const workerId of await this.redis.zrange(keys.workers, '0', '-1')) {
        removed.inFlight += await this.redis.hlen(keys.processing(workerId));
        doomed.push(keys.processing(workerId));
      }
      removed.delayed += await this.redis.zcard(keys.delayed);
      removed.deadLetters += await this.redis.llen(keys.deadLetters);
      doomed.push(
        keys.ring,
        keys.parked,
        keys.throttled,
        keys.delayed,
        keys.deadLetters,
        keys.prioritized,
        keys.inflight,
        keys.counted,
        keys.credit,
        keys.buckets,
        keys.weights,
        keys.rates,
        keys.paused,
        keys.counters,
        keys.workers,
        keys.heartbeats,
        keys.sequence,
        keys.pendingCount,
        keys.history,
        keys.clientConcurrency,
      );
      // Its coalescing keys' records (one per key: found by name; removal is rare, never on a request path).
      doomed.push(...(await keysStartingWith(this.redis, keys.coalesce(''))));
      // Its out-of-line payloads (one per task waiting or held: found by name, as above).
      doomed.push(...(await keysStartingWith(this.redis, keys.body(''))));
      for (let i = 0; i < doomed.length; i += CHUNK) {
        await this.redis.del(...doomed.slice(i, i + CHUNK));
      }
    }
    return removed;
  }
}
