import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Redis } from 'ioredis';
import { RedisTaskAdmin } from '../../lib/index.js';
import { startRedisServer, type RedisServer } from '../../scripts/redis-server.mjs';
import { startProducer, startWorker, type Worker } from '../support/nest.js';
import { readScriptDefinitions } from '../../lib/core/redis/scripts.js';
import { keysUnder, testPrefix, waitFor } from '../support/redis.js';
import { Everything, FEATURES, KEEP_MS, seen } from './fixtures/feature-tour.js';

/**
 * Nothing outlives its retention (DESIGN §3.18), generated over every feature: each one runs to its end on a
 * prefix of its own, and once its documented retention passed, every key it wrote is gone but those
 * docs/WIRE-FORMAT.md says live as long as their queue or prefix, and Redis's memory is back where it was.
 * Every key seen on the way must be one WIRE-FORMAT lists (with its lifetime): a new key without a row fails.
 */

/** WIRE-FORMAT's key table: each row's key patterns as regular expressions, and whether the key lasts. */
function documentedKeys(prefix: string): { pattern: RegExp; lasting: boolean; row: string }[] {
  const text = readFileSync(new URL('../../docs/WIRE-FORMAT.md', import.meta.url), 'utf8');
  const table = text.slice(text.indexOf('| key | type | holds | lifetime |'));
  const rows = table.split('\n').filter((line) => line.startsWith('| `'));
  const escape = (literal: string) => literal.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const root = `${escape(prefix)}:\\{[^}]+\\}`;
  return rows.flatMap((row) => {
    const cells = row.split(/(?<!\\)\|/).map((cell) => cell.trim());
    const lasting = /^as long as/.test(cells[4] ?? '');
    return [...cells[1].matchAll(/`([^`]+)`/g)].map(([, key]) => {
      const source = key
        .split(/(<[^>]+>)/)
        .map((part) => {
          if (part === '<base>') return `${root}(?::g:[^:]+)?`;
          if (part === '<root>') return root;
          if (part === '<prefix>') return escape(prefix);
          if (part.startsWith('<')) return '.+';
          return escape(part);
        })
        .join('');
      return { pattern: new RegExp(`^${source}$`, 's'), lasting, row: key };
    });
  });
}

let server: RedisServer;
let redis: Redis;
/**
 * What Redis 7 allocates, once, for a command's first call (its latency histogram, about 25 KB, counted in
 * used_memory_dataset): measured in beforeAll on a command the library never sends. A feature that is the
 * first to send a command is charged that much per such command, not for data it left.
 */
let histogramBytes = 0;

/** The commands this server has run at least once (INFO commandstats lists those). */
async function commandsRun(): Promise<number> {
  return (await redis.info('commandstats')).split('\n').filter((line) => line.startsWith('cmdstat_')).length;
}

beforeAll(async () => {
  server = await startRedisServer(['--maxmemory-policy', 'noeviction']);
  redis = new Redis(server.url);
  // What a server allocates once (its first clients, scripts compiled, tables grown) is not a feature's: every
  // script cached (a script's body counts in used_memory_dataset, about 200 B to 5 KB each, and a feature that
  // first used one would be charged for it), then one plain run, its keys deleted, before any baseline is taken.
  for (const script of readScriptDefinitions()) {
    await redis.script('LOAD', script.source);
    await redis.script('LOAD', script.flagged.source);
  }
  const prefix = testPrefix('retention-warm');
  const { client, module } = await startProducer(prefix, { connection: server.url });
  const worker = await startWorker(prefix, [Everything], { connection: server.url });
  try {
    await FEATURES[0].run(client, new RedisTaskAdmin(client), async () => undefined);
  } finally {
    await module.close();
    await worker.app.close();
  }
  const keys = await keysUnder(redis, prefix);
  if (keys.length > 0) await redis.del(...keys);
  const before = await usedMemory();
  await redis.echo('a command nothing else sends');
  histogramBytes = (await usedMemory()) - before;
  if (histogramBytes < 0 || histogramBytes > 64 * 1024) throw new Error(`a first call cost ${histogramBytes} bytes`);
}, 60_000);

afterAll(async () => {
  redis.disconnect();
  await server.stop();
});

/**
 * The memory Redis's data takes: used_memory less its overhead (client buffers, the scripts' dictionary). The
 * Lua VM is not in used_memory (Lua allocates outside Redis's allocator: used_memory_vm_eval moves by hundreds
 * of KB with Lua's garbage collector while used_memory stays put), so it is neither counted nor subtracted.
 */
async function usedMemory(): Promise<number> {
  const info = await redis.info('memory');
  return Number(/^used_memory_dataset:(\d+)/m.exec(info)?.[1] ?? 0);
}

describe('nothing outlives its retention (every feature, keys and memory)', () => {
  for (const feature of FEATURES) {
    it(`${feature.name}: back to the lasting keys and the memory it started with once its retention passed`, async () => {
      const prefix = testPrefix('retention');
      const documented = documentedKeys(prefix);
      const undocumented = (key: string) => !documented.some((entry) => entry.pattern.test(key));
      const lasting = (key: string) => documented.some((entry) => entry.lasting && entry.pattern.test(key));
      seen.handled = new Set();
      const memoryBefore = await usedMemory();
      const commandsBefore = await commandsRun();
      let worker: Worker | undefined;
      const { client, module } = await startProducer(prefix, { connection: server.url, enqueueTimeoutMs: 1_000 });
      try {
        worker = await startWorker(prefix, [Everything], {
          connection: server.url,
          resultTtlMs: KEEP_MS,
          reaperIntervalMs: 100,
          backoff: { type: 'fixed', delayMs: 50 },
        });
        const admin = new RedisTaskAdmin(client);
        const seen = new Set<string>();
        const snapshot = async () => {
          for (const key of await keysUnder(redis, prefix)) seen.add(key);
        };
        await feature.run(client, admin, snapshot);
        await snapshot();
        expect([...seen].filter(undocumented)).toEqual([]);
        await waitFor(
          async () => (await keysUnder(redis, prefix)).filter((key) => !lasting(key)).length === 0,
          `every key but the lasting ones gone ${feature.retentionMs} ms on`,
          { timeoutMs: feature.retentionMs + 5_000, intervalMs: 200 },
        ).catch(async (error: unknown) => {
          const left = (await keysUnder(redis, prefix)).filter((key) => !lasting(key));
          throw new Error(`${String(error)}; left: ${left.slice(0, 20).join(', ')}`);
        });
      } finally {
        await module.close();
        await worker?.app.close();
      }
      // What lasts is the queues' own state: small, and gone with the prefix.
      const left = await keysUnder(redis, prefix);
      const lastingBytes = (
        await Promise.all(left.map(async (key) => Number((await redis.call('MEMORY', 'USAGE', key)) ?? 0)))
      ).reduce((sum, bytes) => sum + bytes, 0);
      expect(lastingBytes).toBeLessThan(16 * 1024);
      if (left.length > 0) await redis.del(...left);
      // The data's memory back where it was (the allocator's rounding varies by a few KB; emptied tables shrink
      // on Redis's cron, a few ticks later), less the histograms of the commands this feature sent first.
      const bound = memoryBefore + 64 * 1024 + ((await commandsRun()) - commandsBefore) * histogramBytes;
      await waitFor(async () => (await usedMemory()) < bound, "the data's memory back", {
        timeoutMs: 5_000,
        intervalMs: 100,
      }).catch(async () => {
        expect(await usedMemory()).toBeLessThan(bound);
      });
    }, 90_000);
  }
});
