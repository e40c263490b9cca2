import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { Ctx, EventPattern, Payload } from '@nestjs/microservices';
import { RedisTaskContext, RedisTaskRecordBuilder } from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { startProducer, startWorker } from '../support/nest.js';
import { deleteKeys, keysUnder, openRedis, testPrefix, waitFor } from '../support/redis.js';

const redis = openRedis();
const started: { close(): Promise<unknown> }[] = [];
let prefix = '';
const handled = new Map<string, number>();
const byWorker = new Map<string, number>();
let running = 0;
let maxRunning = 0;

@Controller()
class Counter {
  @EventPattern<string>('count.me')
  async count(@Payload() payload: { key: string }, @Ctx() ctx: RedisTaskContext): Promise<void> {
    running++;
    maxRunning = Math.max(maxRunning, running);
    handled.set(payload.key, (handled.get(payload.key) ?? 0) + 1);
    byWorker.set(ctx.getWorkerId(), (byWorker.get(ctx.getWorkerId()) ?? 0) + 1);
    await new Promise((resolve) => setImmediate(resolve));
    running--;
  }
}

afterEach(async () => {
  await Promise.all(started.splice(0).map((app) => app.close()));
  await deleteKeys(redis, prefix);
});

describe('exactly once without faults', () => {
  it('handles 10,000 tasks from 3 clients exactly once with 4 concurrent handlers across 2 worker apps', async () => {
    prefix = testPrefix('once');
    const { client, module } = await startProducer(prefix);
    started.push(module);
    for (const worker of ['w-a', 'w-b']) {
      const app = await startWorker(prefix, [Counter], { workerId: worker, concurrency: 2 });
      started.push(app.app);
    }
    const total = 10_000;
    const clients = ['c1', 'c2', 'c3'];
    for (let start = 0; start < total; start += 1_000) {
      await client.emitBatch(
        'count.me',
        Array.from({ length: 1_000 }, (_, i) => {
          const n = start + i;
          return new RedisTaskRecordBuilder({ key: `k${n}` }).setClientId(clients[n % 3]).build();
        }),
      );
    }
    await waitFor(() => handled.size === total, `${total} distinct tasks handled`, {
      timeoutMs: 60_000,
      intervalMs: 50,
    });
    const queue = new PrefixKeys(prefix).queue('count.me');
    await waitFor(
      async () => (await redis.hlen(queue.processing('w-a'))) + (await redis.hlen(queue.processing('w-b'))) === 0,
      'all acks',
    );

    expect([...handled.values()].every((count) => count === 1)).toBe(true);
    expect([...handled.values()].reduce((a, b) => a + b, 0)).toBe(total);
    expect(maxRunning).toBeLessThanOrEqual(4);
    expect(maxRunning).toBeGreaterThan(1);
    expect(byWorker.get('w-a')).toBeGreaterThan(0);
    expect(byWorker.get('w-b')).toBeGreaterThan(0);
    // Nothing but the list of patterns, the worker registry, the shard count, the outcome counters (and their
    // per-minute history), the claim counter and the pending count (back to 0) remain.
    // Enqueue calls' records expire with their TTL (enqueueTimeoutMs + 10 s), the mark of the producer's calls
    // 2 s after (call-sequence.ts): kept only for a resend.
    const records = (await keysUnder(redis, prefix)).filter((key) => key.startsWith(`${queue.root}:call:`));
    expect((await Promise.all(records.map((key) => redis.pttl(key)))).every((ttl) => ttl > 0 && ttl <= 17_000)).toBe(
      true,
    );
    // The reapers' sweep turn lives while they run (it expires within their interval): not counted.
    const turn = new PrefixKeys(prefix).sweepTurn;
    const left = (await keysUnder(redis, prefix))
      .filter((key) => !records.includes(key) && key !== turn)
      .map((key) => (key.startsWith(queue.root) ? key.slice(queue.root.length + 1) : key))
      .sort();
    expect(left).toEqual(
      [
        'counters',
        'groups',
        'heartbeats',
        'history',
        'pending-count',
        'sequence',
        'shards',
        'workers',
        `${prefix}:queues`,
      ].sort(),
    );
    expect(await redis.hget(queue.counters, 'completed')).toBe(String(total));
    expect(await redis.get(queue.pendingCount)).toBe('0');
  });
});

afterAll(async () => {
  await redis.quit();
});
