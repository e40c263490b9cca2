import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { EventPattern } from '@nestjs/microservices';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { startProducer, startWorker } from '../support/nest.js';
import { deleteKeys, keysUnder, openRedis, testPrefix, waitFor } from '../support/redis.js';

const redis = openRedis();
const started: { close(): Promise<unknown> }[] = [];
let prefix = '';
let ran = 0;

@Controller()
class Counted {
  @EventPattern<string>('count.me')
  count(): void {
    ran++;
  }
}

afterEach(async () => {
  await Promise.all(started.splice(0).map((app) => app.close()));
  await deleteKeys(redis, prefix);
});

afterAll(async () => {
  await redis.quit();
});

const TASKS = 200_000;

describe('tracking keeps memory bounded', () => {
  it(`leaves the key count flat once ${TASKS.toLocaleString('en-US')} tracked tasks are past their index TTL`, async () => {
    prefix = testPrefix('track-expiry');
    const keepMs = 2_000;
    const { client, module } = await startProducer(prefix, { track: { keepMs } });
    started.push(module);
    const worker = await startWorker(prefix, [Counted], { concurrency: 64 });
    started.push(worker.app);
    await client.emitBatch('count.me', [{ warm: true }]);
    const keys = new PrefixKeys(prefix).queue('count.me');
    await waitFor(async () => (await redis.hget(keys.counters, 'completed')) === '1', 'the first task to run');
    // The queue's own keys, with its first task's index expired.
    await waitFor(
      async () => (await keysUnder(redis, prefix)).every((key) => !key.includes(':task:')),
      'the first index to expire',
      { timeoutMs: keepMs + 5_000, intervalMs: 100 },
    );
    // Each enqueue call's record (what a resent call answers from) lives its call's deadline and 10 s
    // more, tracked or not: counted apart.
    const queueKeys = async () => (await keysUnder(redis, prefix)).filter((key) => !key.includes(':call:'));
    const before = (await queueKeys()).length;
    for (let sent = 0; sent < TASKS; sent += 5_000) {
      await client.emitBatch(
        'count.me',
        Array.from({ length: 5_000 }, (_, n) => ({ n: sent + n })),
      );
    }
    // What this test checks is memory, not speed: 33 s alone on this machine, over 120 s in a full run whose
    // other suites share the two cores and the Redis; the deadline leaves room for both.
    await waitFor(async () => Number(await redis.hget(keys.counters, 'completed')) === TASKS + 1, 'every task to run', {
      timeoutMs: 300_000,
      intervalMs: 200,
    });
    const indexes = (await keysUnder(redis, prefix)).filter((key) => key.includes(':task:')).length;
    expect(indexes).toBeGreaterThan(0); // kept for keepMs after each task ended, then gone
    await waitFor(async () => (await queueKeys()).length === before, 'the key count to be back', {
      timeoutMs: keepMs + 10_000,
      intervalMs: 250,
    });
    expect(ran).toBe(TASKS + 1);
  }, 360_000);
});
