import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { Ctx, EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { Redis } from 'ioredis';
import { firstValueFrom } from 'rxjs';
import {
  RedisTaskAdmin,
  RedisTaskRecordBuilder,
  type RedisTaskClient,
  type RedisTaskContext,
} from '../../lib/index.js';
import { startRedisServer, type RedisServer } from '../../scripts/redis-server.mjs';
import { startProducer, startWorker, type Worker } from '../support/nest.js';
import { keysUnder, testPrefix, waitFor } from '../support/redis.js';

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

let handled = new Set<string>();
let callbacks = 0;

@Controller()
class Everything {
  private failedOnce = new Set<string>();

  @EventPattern<string>('r.plain')
  plain(@Payload() task: { n: number; fail?: boolean }): void {
    if (task.fail && !this.failedOnce.has(String(task.n))) {
      this.failedOnce.add(String(task.n));
      throw new Error('once');
    }
    handled.add(`plain-${task.n}`);
  }

  @EventPattern<string>('r.dead')
  dead(): void {
    throw new Error('always');
  }

  @EventPattern<string>('r.slow')
  async slow(@Payload() task: { n: number }, @Ctx() ctx: RedisTaskContext): Promise<void> {
    await new Promise((resolve) => setTimeout(resolve, 30));
    await ctx.progress({ n: task.n });
    handled.add(`slow-${task.n}`);
  }

  @EventPattern<string>('r.done')
  done(): void {
    callbacks++;
  }

  @MessagePattern('r.send')
  send(@Payload() n: number): number {
    return n * 2;
  }
}

/** A feature run to its end on its own prefix (through `client`), and how long its keys are documented to stay (ms). */
interface Feature {
  readonly name: string;
  readonly retentionMs: number;
  run(client: RedisTaskClient, admin: RedisTaskAdmin, snapshot: () => Promise<void>): Promise<void>;
}

const KEEP_MS = 500;
// An enqueue call's record: its deadline (enqueueTimeoutMs, 1 s here) and 10 s more.
const CALL_RECORD_MS = 11_000;

const FEATURES: Feature[] = [
  {
    name: 'plain tasks (emit, emitBatch, a delay, a retry, a dead letter purged)',
    retentionMs: CALL_RECORD_MS,
    async run(client, admin, snapshot) {
      await client.emitBatch(
        'r.plain',
        Array.from({ length: 50 }, (_, n) => ({ n, fail: n % 10 === 0 })),
      );
      for (let n = 50; n < 60; n++) await firstValueFrom(client.emit('r.plain', { n }));
      await firstValueFrom(client.emit('r.plain', new RedisTaskRecordBuilder({ n: 60 }).setDelay(200).build()));
      await firstValueFrom(client.emit('r.dead', new RedisTaskRecordBuilder({}).setMaxAttempts(1).build()));
      await snapshot();
      await waitFor(
        () => Array.from({ length: 61 }, (_, n) => handled.has(`plain-${n}`)).every(Boolean),
        'plain tasks',
      );
      await waitFor(async () => (await admin.stats('r.dead')).deadLetters === 1, 'a dead letter');
      await admin.purgeDeadLetters('r.dead', 'all');
    },
  },
  {
    name: 'tracked tasks (status, progress, a cancel)',
    retentionMs: CALL_RECORD_MS,
    async run(client, admin, snapshot) {
      const receipts = await client.emitBatch(
        'r.slow',
        Array.from({ length: 20 }, (_, n) => new RedisTaskRecordBuilder({ n }).setTracked({ keepMs: KEEP_MS }).build()),
      );
      const cancelled = await firstValueFrom(
        client.emit(
          'r.slow',
          new RedisTaskRecordBuilder({ n: 99 }).setTracked({ keepMs: KEEP_MS }).setDelay(60_000).build(),
        ),
      );
      await snapshot();
      await admin.cancel('r.slow', cancelled.id);
      await waitFor(() => receipts.every((_, n) => handled.has(`slow-${n}`)), 'tracked tasks');
    },
  },
  {
    name: 'coalescing keys (replace, keep-last, debounce, supersede) and deduplication keys',
    retentionMs: CALL_RECORD_MS + 1_000,
    async run(client, _admin, snapshot) {
      for (const mode of ['replace', 'keep-last', 'debounce', 'supersede'] as const) {
        for (let i = 0; i < 10; i++) {
          const record = new RedisTaskRecordBuilder({ n: 1_000 + i })
            .setCoalesceKey(`k-${mode}-${i % 3}`, { mode, delayMs: mode === 'debounce' ? 50 : undefined })
            .build();
          await firstValueFrom(client.emit('r.slow', record));
        }
      }
      for (let i = 0; i < 10; i++) {
        const record = new RedisTaskRecordBuilder({ n: 2_000 + i })
          .setDeduplicationKey(`d-${i % 4}`, { ttlMs: 1_000, keepAfterSuccess: i % 2 === 0 })
          .build();
        await firstValueFrom(client.emit('r.slow', record));
      }
      await snapshot();
      await waitFor(() => handled.has('slow-1009') && handled.has('slow-2000'), 'the newest coalesced tasks');
    },
  },
  {
    name: 'batches (both callbacks, an id used again once its keys expired)',
    // A callback's enqueue call waits 10 s at most: its record lives 20 s.
    retentionMs: 20_000 + KEEP_MS,
    async run(client, admin, snapshot) {
      const before = callbacks;
      const runBatches = async (round: number) => {
        for (let b = 0; b < 20; b++) {
          const batch = client.batch({
            id: `album-${b}`,
            onComplete: { pattern: 'r.done' },
            onSuccess: { pattern: 'r.done' },
            keepMs: KEEP_MS,
          });
          await batch.add('r.plain', [{ n: 5_000 + round * 100 + b }]);
          await batch.seal();
        }
        if (round === 0) await snapshot();
        await waitFor(async () => {
          const states = await Promise.all(Array.from({ length: 20 }, (_, b) => admin.getBatch(`album-${b}`)));
          return states.every((state) => state.state === 'unknown');
        }, `round ${round}'s batches to expire`);
      };
      await runBatches(0);
      // The README's own `album-${albumId}`, used again once its keys expired: works in full (every callback once).
      await runBatches(1);
      expect(callbacks - before).toBe(2 * 20 * 2);
    },
  },
  {
    name: 'a recurring schedule, to its end and removal',
    // A tick's call record: ten gaps, at least 20 s.
    retentionMs: 21_000,
    async run(client, admin, snapshot) {
      await firstValueFrom(client.emit('r.plain', { n: 9_999 })); // the pattern in use: its count on record
      const startAt = Date.now() + 200;
      await admin.upsertSchedule('pulse', {
        pattern: 'r.plain',
        everyMs: 100,
        startAt,
        endAt: startAt + 500,
        payload: { n: 8_000 },
      });
      await waitFor(async () => (await admin.listSchedules())[0]?.ended, 'the schedule to end');
      await snapshot();
      await admin.removeSchedule('pulse');
    },
  },
  {
    name: 'send() replies',
    retentionMs: CALL_RECORD_MS,
    async run(client, _admin, snapshot) {
      const answers = await Promise.all(Array.from({ length: 20 }, (_, n) => firstValueFrom(client.send('r.send', n))));
      expect(answers).toEqual(Array.from({ length: 20 }, (_, n) => n * 2));
      await snapshot();
    },
  },
];

let server: RedisServer;
let redis: Redis;

beforeAll(async () => {
  server = await startRedisServer(['--maxmemory-policy', 'noeviction']);
  redis = new Redis(server.url);
  // What a server allocates once (its first clients, scripts compiled, tables grown) is not a feature's: one
  // plain run first, its keys deleted, before any baseline is taken.
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
}, 60_000);

afterAll(async () => {
  redis.disconnect();
  await server.stop();
});

/**
 * The memory Redis's data takes: used_memory less its overhead (client buffers, the scripts' cache) and the
 * Lua VM (which grows as scripts are compiled; counted in used_memory since Redis 7).
 */
async function usedMemory(): Promise<number> {
  const info = await redis.info('memory');
  const field = (name: string) => Number(new RegExp(`^${name}:(\\d+)`, 'm').exec(info)?.[1] ?? 0);
  return field('used_memory_dataset') - field('used_memory_vm_eval');
}

describe('nothing outlives its retention (every feature, keys and memory)', () => {
  for (const feature of FEATURES) {
    it(`${feature.name}: back to the lasting keys and the memory it started with once its retention passed`, async () => {
      const prefix = testPrefix('retention');
      const documented = documentedKeys(prefix);
      const undocumented = (key: string) => !documented.some((entry) => entry.pattern.test(key));
      const lasting = (key: string) => documented.some((entry) => entry.lasting && entry.pattern.test(key));
      handled = new Set();
      const memoryBefore = await usedMemory();
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
      // The data's memory back where it was (the allocator's rounding varies by a few KB).
      expect(await usedMemory()).toBeLessThan(memoryBefore + 64 * 1024);
    }, 90_000);
  }
});
