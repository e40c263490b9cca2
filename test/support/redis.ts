import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import type { DeadLetterRecord } from '../../lib/core/model/dead-letter.js';
import type { QueueKeys } from '../../lib/core/redis/keys.js';
import { gatewayOf } from '../../lib/core/redis/gateway.js';
import { useScriptFlags } from '../../lib/core/redis/script-flags.js';
import { versionAtLeast } from '../../lib/core/redis/guardrails.js';
import { defineScripts, readScriptDefinitions, type TaskCommands } from '../../lib/core/redis/scripts.js';

/** The Redis the global setup found or started (never a mock). */
export function redisUrl(): string {
  const url = process.env.REDIS_URL;
  if (!url) {
    throw new Error('REDIS_URL is not set: run the tests through `npm test` (its global setup finds Redis)');
  }
  return url;
}

/** A key prefix no other test (or other user of this Redis) shares. */
export function testPrefix(name: string): string {
  return `t-${name}-${randomBytes(4).toString('hex')}`;
}

export type TestRedis = Redis & TaskCommands;

// Scripts tested as a worker or producer sends them to this server (flagged on Redis 7, see script-flags.ts).
useScriptFlags(versionAtLeast(process.env.TASKS_TEST_REDIS_VERSION ?? '0', '7.0.0'));

export function openRedis(): TestRedis {
  return defineScripts(new Redis(redisUrl())) as TestRedis;
}

/** The server's connections (CLIENT LIST), each as its fields: `id`, `name`, `addr`, `flags`, `idle`, `cmd`, ... */
export async function clientList(redis: Redis): Promise<Record<string, string>[]> {
  return String(await redis.client('LIST'))
    .split('\n')
    .filter((line) => line.startsWith('id='))
    .map((line) =>
      Object.fromEntries(
        line
          .trim()
          .split(' ')
          .map((field) => field.split(/=(.*)/s, 2)),
      ),
    );
}

/** Every key under a test prefix (test support only: the library itself never scans). */
export async function keysUnder(redis: Redis, prefix: string): Promise<string[]> {
  const found: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
    cursor = next;
    found.push(...batch);
  } while (cursor !== '0');
  return found;
}

/** Deletes every key of a test prefix; never FLUSHALL/FLUSHDB (the server is shared). */
export async function deleteKeys(redis: Redis, prefix: string): Promise<void> {
  if (!prefix) {
    return; // a test that never chose a prefix made no keys
  }
  const keys = await keysUnder(redis, prefix);
  for (let i = 0; i < keys.length; i += 500) {
    await redis.del(...keys.slice(i, i + 500));
  }
}

/** Polls until `check` returns a truthy value, or fails with `what` at the deadline. */
export async function waitFor<T>(
  check: () => T | Promise<T>,
  what: string,
  { timeoutMs = 15_000, intervalMs = 10 }: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let last: T | undefined;
  while (Date.now() < deadline) {
    last = await check();
    if (last) {
      return last as NonNullable<T>;
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last value: ${JSON.stringify(last)})`);
}

/** A promise with its resolve function, for handlers that should wait until the test lets them go. */
export function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { promise, open };
}

/**
 * Claims up to `count` tasks as `workerId` would (round-robin over the ring), acknowledging `acks`
 * first, through the script gateway. Resolves with the flat token/entry array, or with why nothing
 * could be claimed (`unregistered`, `paused`).
 */
export async function claimAs(
  redis: TestRedis,
  queue: QueueKeys,
  workerId: string,
  count: number,
  acks: string[] = [],
  clientConcurrency = 0,
): Promise<string[] | 'unregistered' | 'paused'> {
  const { outcome } = await gatewayOf(redis).claim(queue, {
    workerId,
    wanted: count,
    clientConcurrency,
    leaseMs: 60_000,
    tokenPrefix: `${randomBytes(4).toString('hex')}.`,
    acks,
  });
  return outcome.kind === 'claimed' ? [...outcome.pairs] : outcome.kind;
}

/** The newest dead letter of a queue, once there is one. */
export async function newestDeadLetter(redis: Redis, queue: QueueKeys): Promise<DeadLetterRecord> {
  return waitFor(async () => {
    const [raw] = await redis.lrange(queue.deadLetters, 0, 0);
    return raw === undefined ? undefined : (JSON.parse(raw) as DeadLetterRecord);
  }, `a dead letter of ${queue.queue}`);
}

/**
 * Every key under a prefix with its type and serialized value (DUMP, hex) and TTL presence: two
 * snapshots are equal exactly when nothing under the prefix changed.
 */
export async function snapshotKeys(redis: Redis, prefix: string): Promise<Record<string, string>> {
  const snapshot: Record<string, string> = {};
  for (const key of (await keysUnder(redis, prefix)).sort()) {
    const [type, dumped, ttl] = await Promise.all([redis.type(key), redis.dumpBuffer(key), redis.pttl(key)]);
    snapshot[key] = `${type} ${ttl >= 0 ? 'ttl' : 'no-ttl'} ${dumped?.toString('hex') ?? ''}`;
  }
  return snapshot;
}

/**
 * Each script's name by the SHA1 an EVALSHA names it with: the script as written, or under its Redis 7 flags
 * line (as the library sends it there).
 */
export function scriptNamesBySha(): Map<string, string> {
  return new Map(
    readScriptDefinitions().flatMap(
      (script) =>
        [
          [script.sha, script.name],
          [script.flagged.sha, script.name],
        ] as const,
    ),
  );
}
