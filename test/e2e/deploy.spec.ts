import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { lastValueFrom } from 'rxjs';
import { WorkerIdInUseError } from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { gatewayOf } from '../../lib/core/redis/gateway.js';
import { startProducer, startWorker } from '../support/nest.js';
import { claimAs, deleteKeys, gate, openRedis, testPrefix, waitFor } from '../support/redis.js';

// A deploy (SIGTERM with shutdown hooks, or app.close()) while tasks flow must never run a finished task
// again: closing, then restarting with the same worker id, each task's handler finishes exactly once.

const redis = openRedis();
const apps: { close(): Promise<unknown> }[] = [];
let prefix = '';
/** How many times each task's handler ran to its end (written synchronously, as a side effect would be). */
const finished = new Map<string, number>();
/** How many times each task's handler started. */
const started = new Map<string, number>();
let held = gate();

@Controller()
class Flow {
  @EventPattern<string>('deploy.flow')
  async flow(@Payload() payload: { key: string }): Promise<void> {
    await new Promise((resolve) => setTimeout(resolve, 3));
    finished.set(payload.key, (finished.get(payload.key) ?? 0) + 1);
  }

  @EventPattern<string>('deploy.hold')
  async hold(@Payload() payload: { key: string }): Promise<void> {
    started.set(payload.key, (started.get(payload.key) ?? 0) + 1);
    await held.promise;
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
  held.open();
  await Promise.all(apps.splice(0).map((app) => app.close()));
  await deleteKeys(redis, prefix);
  finished.clear();
  started.clear();
  held = gate();
});

afterAll(async () => {
  await redis.quit();
});

const reruns = () => [...finished.entries()].filter(([, count]) => count > 1).map(([key]) => key);

describe('a deploy while tasks flow', () => {
  it.each([
    { concurrency: 1, trials: 15, perTrial: 60 },
    { concurrency: 64, trials: 8, perTrial: 2_000 },
  ])(
    're-runs no finished task over $trials close-and-restart trials at concurrency $concurrency',
    async ({ concurrency, trials, perTrial }) => {
      prefix = testPrefix(`deploy-c${concurrency}`);
      const { client, module } = await startProducer(prefix);
      apps.push(module);
      let total = 0;
      for (let trial = 0; trial < trials; trial++) {
        await client.emitBatch(
          'deploy.flow',
          Array.from({ length: perTrial }, (_, i) => ({ key: `t${trial}-${i}` })),
        );
        total += perTrial;
        const worker = await startWorker(prefix, [Flow], {
          workerId: 'deploy-w',
          concurrency,
          reaperIntervalMs: false,
        });
        // Close while tasks flow: once some of this trial's tasks finished, at a varying point.
        const threshold = total - perTrial + Math.floor((perTrial / 3) * (1 + (trial % 3) / 2));
        await waitFor(() => finished.size >= threshold, `${threshold} tasks finished`, {
          timeoutMs: 30_000,
          intervalMs: 1,
        });
        await worker.app.close();
      }
      // One last run with the same id drains what the closes left.
      const last = await startWorker(prefix, [Flow], { workerId: 'deploy-w', concurrency, reaperIntervalMs: false });
      apps.push(last.app);
      await waitFor(() => finished.size === total, `${total} distinct tasks finished`, { timeoutMs: 60_000 });
      const queue = new PrefixKeys(prefix).queue('deploy.flow');
      await waitFor(async () => (await redis.hlen(queue.processing('deploy-w'))) === 0, 'every task acknowledged');
      expect(reruns()).toEqual([]);
      expect(await redis.get(queue.pendingCount)).toBe('0');
    },
  );

  it('re-runs no send() task over 10 close-and-restart trials, and every caller gets its one reply', async () => {
    prefix = testPrefix('deploy-send');
    const { client, module } = await startProducer(prefix);
    apps.push(module);
    const replies: Promise<string>[] = [];
    let total = 0;
    for (let trial = 0; trial < 10; trial++) {
      for (let i = 0; i < 100; i++)
        replies.push(lastValueFrom(client.send<string>('deploy.reply', { key: `s${trial}-${i}` })));
      total += 100;
      const worker = await startWorker(prefix, [Flow], {
        workerId: 'deploy-s',
        concurrency: 8,
        reaperIntervalMs: false,
      });
      const threshold = total - 100 + 10 + ((trial * 13) % 60);
      await waitFor(() => finished.size >= threshold, `${threshold} tasks finished`, {
        timeoutMs: 30_000,
        intervalMs: 1,
      });
      await worker.app.close();
    }
    const last = await startWorker(prefix, [Flow], { workerId: 'deploy-s', concurrency: 8, reaperIntervalMs: false });
    apps.push(last.app);
    const answered = await Promise.all(replies);
    expect(answered).toHaveLength(total);
    expect(new Set(answered).size).toBe(total);
    expect(reruns()).toEqual([]);
  });
});

describe('two processes with one worker id', () => {
  it("refuses the second while the first is alive, naming the id, and runs none of the first one's tasks again", async () => {
    prefix = testPrefix('dup-id');
    const { client, module } = await startProducer(prefix);
    apps.push(module);
    await client.emitBatch('deploy.hold', [{ key: 'a' }, { key: 'b' }, { key: 'c' }, { key: 'd' }]);
    const first = await startWorker(prefix, [Flow], {
      workerId: 'shared-id',
      concurrency: 4,
      idleSlots: 0, // all four slots for the one busy pattern
      heartbeatIntervalMs: 100,
      leaseMs: 2_000,
    });
    apps.push(first.app);
    await waitFor(() => started.size === 4, 'four tasks running');

    const refused = await startWorker(prefix, [Flow], {
      workerId: 'shared-id',
      concurrency: 4,
      heartbeatIntervalMs: 100,
      leaseMs: 2_000,
    }).then(
      (second) => {
        apps.push(second.app);
        return undefined;
      },
      (error: unknown) => error,
    );
    expect(refused).toBeInstanceOf(WorkerIdInUseError);
    expect((refused as WorkerIdInUseError).message).toContain('"shared-id"');
    expect((refused as WorkerIdInUseError).code).toBe('WORKER_ID_IN_USE');
    // The first worker still holds its four tasks, and none started twice.
    const queue = new PrefixKeys(prefix).queue('deploy.hold');
    expect(await redis.hlen(queue.processing('shared-id'))).toBe(4);
    expect([...started.values()]).toEqual([1, 1, 1, 1]);
    held.open();
    await waitFor(() => finished.size === 4, 'the first worker finishes its tasks');
    expect([...started.values()]).toEqual([1, 1, 1, 1]);
  });

  it('resumes the tasks of a previous run that stopped without closing once its heartbeat stands still', async () => {
    prefix = testPrefix('dead-id');
    const { client, module } = await startProducer(prefix);
    apps.push(module);
    await client.emitBatch('deploy.flow', [{ key: 'x' }, { key: 'y' }]);
    const queue = new PrefixKeys(prefix).queue('deploy.flow');
    // A previous run took its lease (unexpired) and claimed both tasks, then died (no more heartbeats).
    await gatewayOf(redis).heartbeat(queue, 'crashed-id', 30_000);
    await claimAs(redis, queue, 'crashed-id', 2);
    const worker = await startWorker(prefix, [Flow], {
      workerId: 'crashed-id',
      heartbeatIntervalMs: 100,
      leaseMs: 2_000,
    });
    apps.push(worker.app);
    await waitFor(() => finished.size === 2, 'both tasks resumed and run');
    expect([...finished.values()]).toEqual([1, 1]);
  });
});
