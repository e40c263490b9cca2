import { Cluster, type Redis } from 'ioredis';
import { PrefixInUseError } from '../model/errors.js';
import { closeConnection, openConnection, type RedisTaskConnection } from '../redis/connection.js';
import type { RedisConnection } from '../redis/scripts.js';

/** What `deletePrefix` removed. */
export interface DeletedPrefix {
  /** The prefix whose keys were deleted. */
  readonly prefix: string;
  /** How many keys were deleted. */
  readonly deleted: number;
}

/** Every key whose name starts with `start`, walked with SCAN on every primary (of a Cluster) or the server. */
export async function keysStartingWith(redis: RedisConnection, start: string): Promise<string[]> {
  const nodes: Redis[] = redis instanceof Cluster ? redis.nodes('master') : [redis];
  const keys: string[] = [];
  for (const node of nodes) {
    let cursor = '0';
    do {
      const [next, batch] = await node.scan(cursor, 'MATCH', `${literal(start)}*`, 'COUNT', 1000);
      cursor = next;
      keys.push(...batch);
    } while (cursor !== '0');
  }
  return keys;
}

/** A glob pattern matching `text` literally (SCAN MATCH's special characters escaped). */
function literal(text: string): string {
  return text.replace(/[*?[\]\\]/g, (c) => `\\${c}`);
}

/**
 * Deletes every key of one prefix: `<prefix>:queues` and every `<prefix>:{…}` key (every queue, shard and
 * consumer group). A prefix cannot hold braces, so another prefix (`tasks:eu` next to `tasks`) never
 * matches. Refused with `PrefixInUseError`, nothing deleted, while a worker of the prefix holds a live
 * lease (stop the workers first; a worker that died is no obstacle once its lease ran out). Walks the keys
 * with SCAN (on every primary of a Cluster) and deletes them with UNLINK, 500 at a time: for tests,
 * teardown and decommissioning, not for a request path.
 */
export async function deletePrefix(redis: RedisConnection, prefix: string): Promise<DeletedPrefix> {
  const nodes: Redis[] = redis instanceof Cluster ? redis.nodes('master') : [redis];
  const workerRegistry = new RegExp(
    `^${prefix.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:\\{[^}]*\\}(:g:[^:]+)?:workers$`,
  );
  const found: string[][] = [];
  const live: string[] = [];
  const [seconds, micros] = await redis.time();
  const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
  for (const node of nodes) {
    const keys: string[] = [];
    let cursor = '0';
    do {
      const [next, batch] = await node.scan(cursor, 'MATCH', `${literal(prefix)}:*`, 'COUNT', 1000);
      cursor = next;
      for (const key of batch) {
        if (key !== `${prefix}:queues` && !key.startsWith(`${prefix}:{`)) continue;
        keys.push(key);
        if (workerRegistry.test(key) && (await node.type(key)) === 'zset') {
          // Scores are lease expiries (ms, Redis clock): one in the future is a worker alive now.
          live.push(...(await node.zrangebyscore(key, now + 1, '+inf')));
        }
      }
    } while (cursor !== '0');
    found.push(keys);
  }
  if (live.length > 0) throw new PrefixInUseError(prefix, [...new Set(live)]);
  let deleted = 0;
  for (const [index, keys] of found.entries()) {
    for (let at = 0; at < keys.length; at += 500) {
      // On a Cluster node the keys of one command must share a slot: there, one UNLINK per key, pipelined.
      const slice = keys.slice(at, at + 500);
      if (redis instanceof Cluster) {
        const results = await nodes[index].pipeline(slice.map((key) => ['unlink', key])).exec();
        deleted += (results ?? []).reduce((sum, [, count]) => sum + Number(count ?? 0), 0);
      } else {
        deleted += await nodes[index].unlink(...slice);
      }
    }
  }
  return { prefix, deleted };
}

/** `deletePrefix` on a connection of its own, opened from a `connection` option and closed after. */
export async function deletePrefixAt(connection: RedisTaskConnection, prefix: string): Promise<DeletedPrefix> {
  const owned = openConnection(connection, 'tasks:cleanup');
  try {
    return await deletePrefix(owned.redis, prefix);
  } finally {
    await closeConnection(owned);
  }
}
