import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { Ctx, EventPattern, Payload } from '@nestjs/microservices';
import {
  InvalidOptionError,
  RedisTaskAdmin,
  RedisTaskContext,
  RedisTaskRecordBuilder,
  RedisTaskTransport,
} from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { startProducer, startWorker } from '../support/nest.js';
import { deleteKeys, openRedis, testPrefix, waitFor } from '../support/redis.js';

const redis = openRedis();
const started: { close(): Promise<unknown> }[] = [];
let prefix = '';
const starts: { clientId: string; at: number }[] = [];

@Controller()
class Handlers {
  @EventPattern<string>('trickle', { clientRateLimit: 1 })
  trickle(@Payload() _payload: unknown, @Ctx() ctx: RedisTaskContext): void {
    starts.push({ clientId: ctx.getClientId(), at: Date.now() });
  }

  @EventPattern<string>('limited', { clientRateLimit: 50 })
  limited(@Payload() _payload: unknown, @Ctx() ctx: RedisTaskContext): void {
    starts.push({ clientId: ctx.getClientId(), at: Date.now() });
  }
}

afterEach(async () => {
  await Promise.all(started.splice(0).map((app) => app.close()));
  await deleteKeys(redis, prefix);
  starts.length = 0;
});

afterAll(async () => {
  await redis.quit();
});

describe('per-client rate limits', () => {
  it('runs a client limited to 50 tasks/s at 50 ±10% per second while an unlimited client drains at full speed', async () => {
    prefix = testPrefix('rate');
    const { client, module } = await startProducer(prefix);
    started.push(module);
    const admin = new RedisTaskAdmin(client);
    await client.emitBatch(
      'limited',
      Array.from({ length: 400 }, (_, n) => new RedisTaskRecordBuilder({ n }).setClientId('metered').build()),
    );
    for (let start = 0; start < 6_000; start += 1_000) {
      await client.emitBatch(
        'limited',
        Array.from({ length: 1_000 }, (_, n) =>
          new RedisTaskRecordBuilder({ n: start + n }).setClientId('free').build(),
        ),
      );
    }
    // The pattern limits every client to 50/s; 'free' is given a limit too high to matter.
    await admin.setClientRateLimit('limited', 'free', 1_000_000);
    started.push((await startWorker(prefix, [Handlers], { concurrency: 8 })).app);
    const begin = Date.now();
    // The unlimited client is not held back: all of its tasks run within the deadline (at least 300/s, six times
    // the pattern's limit).
    await waitFor(() => starts.filter((s) => s.clientId === 'free').length === 6_000, "the free client's 6,000 tasks", {
      timeoutMs: 20_000,
      intervalMs: 20,
    });
    // Meanwhile the metered one kept to its limit: its burst of 5, then 50/s (+10%) for as long as that took,
    // plus what its 8 slots held (a count, not a speed: a loaded CI machine took 6.6 s and ran 328 of them).
    const elapsed = (Date.now() - begin) / 1_000;
    expect(starts.filter((s) => s.clientId === 'metered').length).toBeLessThanOrEqual(5 + 8 + Math.ceil(55 * elapsed));
    const first = starts.find((s) => s.clientId === 'metered')?.at ?? begin;
    await waitFor(() => Date.now() - first >= 3_100, "three seconds of the metered client's tasks", {
      timeoutMs: 10_000,
      intervalMs: 50,
    });
    const metered = starts.filter((s) => s.clientId === 'metered').map((s) => s.at);
    // Steady rate after the first second (its burst of 5 left out): tasks per second over two seconds.
    const steady = metered.filter((at) => at >= first + 1_000 && at < first + 3_000).length / 2;
    expect(steady).toBeGreaterThanOrEqual(45);
    expect(steady).toBeLessThanOrEqual(55);
  });

  it("counts a rate-limited client's waiting tasks as pending while it is off the ring (stats, CLI, metrics)", async () => {
    prefix = testPrefix('rate-stats');
    const { client, module } = await startProducer(prefix);
    started.push(module);
    const admin = new RedisTaskAdmin(client);
    await client.emitBatch(
      'trickle',
      Array.from({ length: 5 }, (_, n) => new RedisTaskRecordBuilder({ n }).setClientId('slow').build()),
    );
    started.push((await startWorker(prefix, [Handlers])).app);
    const queue = new PrefixKeys(prefix).queue('trickle');
    await waitFor(async () => (await redis.zscore(queue.throttled, 'slow')) !== null, 'the client to be throttled');
    const stats = await admin.stats('trickle');
    const waiting = await redis.llen(queue.pending('slow'));
    expect(waiting).toBeGreaterThan(0);
    expect(stats.pending).toEqual({ total: waiting, byClient: { slow: waiting } });
  });

  it('refuses a rate that is not above 0, naming it', async () => {
    expect(() => new RedisTaskTransport({ clientRateLimit: 0 })).toThrow(InvalidOptionError);
    expect(() => new RedisTaskTransport({ clientRateLimit: -1 })).toThrow(
      'option "clientRateLimit" must be a number of tasks per second above 0',
    );
    prefix = testPrefix('rate-bad');
    const { client, module } = await startProducer(prefix);
    started.push(module);
    const admin = new RedisTaskAdmin(client);
    await expect(admin.setClientRateLimit('limited', 'a', 0)).rejects.toThrow(
      'option "rate" must be a number of tasks per second above 0',
    );
    await expect(admin.setClientRateLimit('limited', '*', 5)).rejects.toThrow('option "clientId"');
  });
});
