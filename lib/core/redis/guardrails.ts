import { permissionRefusal } from './refusals.js';
import { useScriptFlags } from './script-flags.js';
import { Cluster, type Redis } from 'ioredis';
import { RedisTaskError } from '../model/errors.js';
import type { QueueLayout } from './keys.js';
import type { TaskLogger } from '../support/logger.js';
import type { RedisConnection } from './scripts.js';

/** What to do when Redis may evict keys (`maxmemory-policy` other than `noeviction`). */
export type EvictionPolicyCheck = 'warn' | 'refuse' | 'off';

/** The Redis server cannot hold tasks safely (too old, or allowed to evict them). Thrown at start-up. */
export class UnsafeRedisError extends RedisTaskError {
  constructor(code: 'REDIS_TOO_OLD' | 'UNSAFE_EVICTION_POLICY' | 'CLUSTER_KEY_LAYOUT', message: string) {
    super(code, `nestjs-redis-tasks: ${message}`);
  }
}

export const MINIMUM_REDIS_VERSION = '6.2.0';
/** The first Redis that reads script flags (`#!lua flags=…`). */
const SCRIPT_FLAGS_VERSION = '7.0.0';

/** A Redis NOPERM reply (or its form inside a script): the ACL user may not run the command (or touch the key). */
export function isPermissionError(error: unknown): boolean {
  return permissionRefusal(error) !== undefined;
}

/** True when `version` (e.g. "7.0.15") is at least `minimum`. */
export function versionAtLeast(version: string, minimum: string): boolean {
  const parse = (v: string) => v.split('.').map((part) => Number.parseInt(part, 10) || 0);
  const [a, b] = [parse(version), parse(minimum)];
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    if ((a[i] ?? 0) !== (b[i] ?? 0)) return (a[i] ?? 0) > (b[i] ?? 0);
  }
  return true;
}

/**
 * Start-up checks: Redis ≥ 6.2 (LMOVE, LPOP with a count), and a `maxmemory-policy` that never
 * evicts keys (an evicting Redis can drop queued tasks). A server that hides CONFIG (a managed Redis,
 * an ACL) is trusted on the policy, and that is logged. On a Cluster every primary is checked.
 */
export async function checkServer(
  connection: RedisConnection,
  evictionPolicy: EvictionPolicyCheck,
  logger: TaskLogger,
): Promise<void> {
  const nodes = connection instanceof Cluster ? connection.nodes('master') : [connection];
  for (const node of nodes) {
    await checkNode(node, evictionPolicy, logger);
  }
}

async function checkNode(redis: Redis, evictionPolicy: EvictionPolicyCheck, logger: TaskLogger): Promise<void> {
  let info: string;
  try {
    info = await redis.info('server');
  } catch (error) {
    if (!isPermissionError(error)) throw error;
    // A least-privilege ACL user may not run INFO: warn, and trust the server as the ACL's owner does.
    logger.warn(
      'could not read the Redis version (INFO is not allowed for this ACL user): make sure the server is Redis 6.2 or newer',
    );
    info = `redis_version:${MINIMUM_REDIS_VERSION}`;
  }
  const version = /redis_version:(\S+)/.exec(info)?.[1] ?? '0';
  if (!versionAtLeast(version, MINIMUM_REDIS_VERSION)) {
    throw new UnsafeRedisError(
      'REDIS_TOO_OLD',
      `Redis ${version} is too old: ${MINIMUM_REDIS_VERSION} or newer is needed (LMOVE, LPOP with a count)`,
    );
  }
  // Redis 7 runs scripts with flags: the ones a worker drains a full Redis with may run then (script-flags.ts).
  if (versionAtLeast(version, SCRIPT_FLAGS_VERSION)) useScriptFlags(true);
  if (evictionPolicy === 'off') {
    return;
  }
  let policy: string | undefined;
  try {
    const reply = (await redis.config('GET', 'maxmemory-policy')) as unknown;
    policy = Array.isArray(reply) ? String(reply[1]) : (reply as Record<string, string>)['maxmemory-policy'];
  } catch (error) {
    if (!isPermissionError(error) && !/unknown command|CONFIG/i.test((error as Error).message)) throw error;
    logger.warn('could not read maxmemory-policy (CONFIG is not allowed here): make sure it is noeviction');
    return;
  }
  if (policy === undefined || policy === 'noeviction') {
    return;
  }
  const message = `Redis maxmemory-policy is "${policy}": under memory pressure Redis may evict queued tasks; set maxmemory-policy noeviction`;
  if (evictionPolicy === 'refuse') {
    throw new UnsafeRedisError('UNSAFE_EVICTION_POLICY', `${message} (refused because evictionPolicy is "refuse")`);
  }
  logger.warn(message);
}

/**
 * On a Cluster: asks the cluster which slot each kind of key of every shard maps to, and refuses to
 * start unless all of a shard's keys share one slot (every script must touch one slot). Logs which
 * primaries a sharded queue's shards live on, and warns when they share fewer primaries than they could.
 */
export async function checkClusterLayout(
  connection: RedisConnection,
  layout: QueueLayout,
  logger: TaskLogger,
): Promise<void> {
  if (!(connection instanceof Cluster)) {
    return;
  }
  const owners = new Set<string>();
  for (const shard of layout.shards) {
    const samples = [
      shard.ring,
      shard.pending('client'),
      shard.priority('client'),
      shard.processing('worker'),
      shard.dedup('key'),
      shard.result('id'),
    ];
    for (const key of samples) {
      const slot = Number(await connection.call('CLUSTER', 'KEYSLOT', key));
      if (slot !== shard.slot) {
        throw new UnsafeRedisError(
          'CLUSTER_KEY_LAYOUT',
          `key "${key}" of queue "${layout.queue}" maps to cluster slot ${slot}, not ${shard.slot} like the rest of its shard: scripts would fail with CROSSSLOT`,
        );
      }
    }
    const owner = connection.slots[shard.slot]?.[0];
    if (owner) owners.add(owner);
  }
  if (layout.shardCount > 1) {
    const primaries = connection.nodes('master').length;
    const message = `queue "${layout.queue}": ${layout.shardCount} shard(s) on ${owners.size} of ${primaries} primaries (${[...owners].sort().join(', ')})`;
    if (owners.size < Math.min(layout.shardCount, primaries)) {
      logger.warn(`${message}; the cluster's slots are not split evenly, so some primaries carry more shards`);
    } else {
      logger.log(message);
    }
  }
}
