import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { EventPattern, Payload } from '@nestjs/microservices';
import { RedisTaskAdmin, RedisTaskRecordBuilder } from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { startProducer, startWorker } from '../support/nest.js';
import { deleteKeys, openRedis, testPrefix, waitFor } from '../support/redis.js';

// A stray key (a hand edit, another program) must strand nothing: the claim refuses a broken processing
// hash before it writes, and the reaper's ring audit puts back clients whose tasks nothing could reach.

const redis = openRedis();
const apps: { close(): Promise<unknown> }[] = [];
let prefix = '';
const ran = new Map<string, number>();

@Controller()
class Handlers {
  @EventPattern<string>('stray.work')
  work(@Payload() payload: { key: string }): void {
    ran.set(payload.key, (ran.get(payload.key) ?? 0) + 1);
  }
}

afterEach(async () => {
  await Promise.all(apps.splice(0).map((app) => app.close()));
  await deleteKeys(redis, prefix);
  ran.clear();
});

afterAll(async () => {
  await redis.quit();
});

describe('stray keys', () => {
  it('sets aside a processing hash made a string, and runs all 40 tasks (10 prioritized) exactly once, none malformed', async () => {
    prefix = testPrefix('stray-processing');
    const queue = new PrefixKeys(prefix).queue('stray.work');
    // The worker's processing hash is a string before it claims anything.
    await redis.set(queue.processing('stray-w'), 'x');
    const { client, module } = await startProducer(prefix);
    apps.push(module);
    await client.emitBatch(
      'stray.work',
      Array.from({ length: 40 }, (_, i) =>
        new RedisTaskRecordBuilder({ key: `k${i}` })
          .setClientId(`c${i}`)
          .setPriority(i % 4 === 0 ? 5 : 0)
          .build(),
      ),
    );
    const worker = await startWorker(prefix, [Handlers], { workerId: 'stray-w', concurrency: 8, clientConcurrency: 2 });
    apps.push(worker.app);
    await waitFor(() => ran.size === 40, 'all 40 tasks ran', { timeoutMs: 15_000 });
    expect([...ran.values()].every((count) => count === 1)).toBe(true);
    expect(await redis.llen(queue.deadLetters)).toBe(0);
    expect(await redis.hget(queue.faults, queue.processing('stray-w'))).toMatch(
      /held a string, not a hash; renamed to/,
    );
  });

  it('finds a client taken off the ring by hand (the reaper audit), so its old and new tasks run; stats and faults say so', async () => {
    prefix = testPrefix('stray-ring');
    const queue = new PrefixKeys(prefix).queue('stray.work');
    const { client, module } = await startProducer(prefix);
    apps.push(module);
    await client.emitBatch(
      'stray.work',
      [1, 2, 3].map((n) => new RedisTaskRecordBuilder({ key: `old${n}` }).setClientId('lost').build()),
    );
    await redis.del(queue.ring); // a hand edit strands client "lost"
    await client.emitBatch('stray.work', [new RedisTaskRecordBuilder({ key: 'new' }).setClientId('lost').build()]);
    expect(await redis.llen(queue.ring)).toBe(0); // the new emit alone does not bring it back
    const worker = await startWorker(prefix, [Handlers], { workerId: 'ring-w', reaperIntervalMs: 100 });
    apps.push(worker.app);
    await waitFor(() => ran.size === 4, 'the stranded and the new tasks ran', { timeoutMs: 15_000 });
    const stats = await module.get(RedisTaskAdmin).stats('stray.work');
    expect(stats.faults.map((fault) => fault.subject)).toContain(queue.pending('lost'));
    expect(stats.faults.find((fault) => fault.subject === queue.pending('lost'))?.detail).toMatch(
      /had 4 pending task\(s\) but its client was off the ring/,
    );
  });
});
