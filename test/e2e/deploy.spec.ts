import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { lastValueFrom } from 'rxjs';
import { PrefixKeys } from '../../lib/index.js';
import { startProducer, startWorker } from '../support/nest.js';
import { deleteKeys, openRedis, testPrefix, waitFor } from '../support/redis.js';

// A deploy (SIGTERM with shutdown hooks, or app.close()) while tasks flow must never run a finished task
// again: closing, then restarting with the same worker id, each task's handler finishes exactly once.

const redis = openRedis();
const started: { close(): Promise<unknown> }[] = [];
let prefix = '';
/** How many times each task's handler ran to its end (written synchronously, as a side effect would be). */
const finished = new Map<string, number>();

@Controller()
class Flow {
  @EventPattern<string>('deploy.flow')
  async flow(@Payload() payload: { key: string }): Promise<void> {
    await new Promise((resolve) => setTimeout(resolve, 3));
    finished.set(payload.key, (finished.get(payload.key) ?? 0) + 1);
  }

  @MessagePattern<string>('deploy.reply')
  async reply(@Payload() payload: { key: string }): Promise<string> {
    await new Promise((resolve) => setTimeout(resolve, 3));
    finished.set(payload.key, (finished.get(payload.key) ?? 0) + 1);
    return payload.key;
  }
}

afterEach(async () => {
  await Promise.all(started.splice(0).map((app) => app.close()));
  await deleteKeys(redis, prefix);
  finished.clear();
});

afterAll(async () => {
  await redis.quit();
});

const reruns = () => [...finished.entries()].filter(([, count]) => count > 1).map(([key]) => key);

describe('a deploy while tasks flow', () => {
  it.each([
    { concurrency: 1, trials: 15, perTrial: 60 },
    { concurrency: 64, trials: 8, perTrial: 2_000 },
  ])('re-runs no finished task over $trials close-and-restart trials at concurrency $concurrency', async ({ concurrency, trials, perTrial }) => {
    prefix = testPrefix(`deploy-c${concurrency}`);
    const { client, module } = await startProducer(prefix, { reaperIntervalMs: false });
    started.push(module);
    let total = 0;
    for (let trial = 0; trial < trials; trial++) {
      await client.emitBatch(
        'deploy.flow',
        Array.from({ length: perTrial }, (_, i) => ({ key: `t${trial}-${i}` })),
      );
      total += perTrial;
      const worker = await startWorker(prefix, [Flow], { workerId: 'deploy-w', concurrency, reaperIntervalMs: false });
      // Close while tasks flow: once some of this trial's tasks finished, at a varying point.
      const threshold = total - perTrial + Math.floor((perTrial / 3) * (1 + (trial % 3) / 2));
      await waitFor(() => finished.size >= threshold, `${threshold} tasks finished`, { timeoutMs: 30_000, intervalMs: 1 });
      await worker.app.close();
    }
    // One last run with the same id drains what the closes left.
    const last = await startWorker(prefix, [Flow], { workerId: 'deploy-w', concurrency, reaperIntervalMs: false });
    started.push(last.app);
    await waitFor(() => finished.size === total, `${total} distinct tasks finished`, { timeoutMs: 60_000 });
    const queue = new PrefixKeys(prefix).queue('deploy.flow');
    await waitFor(async () => (await redis.hlen(queue.processing('deploy-w'))) === 0, 'every task acknowledged');
    expect(reruns()).toEqual([]);
    expect(await redis.get(queue.pendingCount)).toBe('0');
  });

  it('re-runs no send() task over 10 close-and-restart trials, and every caller gets its one reply', async () => {
    prefix = testPrefix('deploy-send');
    const { client, module } = await startProducer(prefix, { reaperIntervalMs: false });
    started.push(module);
    const replies: Promise<string>[] = [];
    let total = 0;
    for (let trial = 0; trial < 10; trial++) {
      for (let i = 0; i < 100; i++) replies.push(lastValueFrom(client.send<string>('deploy.reply', { key: `s${trial}-${i}` })));
      total += 100;
      const worker = await startWorker(prefix, [Flow], { workerId: 'deploy-s', concurrency: 8, reaperIntervalMs: false });
      const threshold = total - 100 + 10 + ((trial * 13) % 60);
      await waitFor(() => finished.size >= threshold, `${threshold} tasks finished`, { timeoutMs: 30_000, intervalMs: 1 });
      await worker.app.close();
    }
    const last = await startWorker(prefix, [Flow], { workerId: 'deploy-s', concurrency: 8, reaperIntervalMs: false });
    started.push(last.app);
    const answered = await Promise.all(replies);
    expect(answered).toHaveLength(total);
    expect(new Set(answered).size).toBe(total);
    expect(reruns()).toEqual([]);
  });
});
