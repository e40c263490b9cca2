import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { EventPattern, Payload } from '@nestjs/microservices';
import { HealthCheckService } from '@nestjs/terminus';
import { Redis } from 'ioredis';
import { firstValueFrom } from 'rxjs';
import { RedisFullError, RedisTaskAdmin, RedisTaskClient } from '../../lib/index.js';
import { RedisTaskMetrics } from '../../lib/metrics.js';
import { RedisTaskHealthIndicator } from '../../lib/terminus.js';
import { startRedisServer, type RedisServer } from '../../scripts/redis-server.mjs';
import { startWorker, startOpsModule } from '../support/nest.js';
import { testPrefix, waitFor } from '../support/redis.js';

/**
 * A full Redis (`maxmemory` reached, `noeviction`) is drained by starting a worker: what a worker writes to
 * start, claim, settle and recover runs at the limit (Redis 7's `allow-oom` script flag), while enqueues are
 * refused whole with a typed error; health and metrics say Redis is full.
 */
let handled = 0;

@Controller()
class Drain {
  @EventPattern<string>('full.work')
  work(@Payload() task: { n: number; fail?: boolean }): void {
    handled++;
    if (task.fail) throw new Error('fails once, then dead-letters');
  }
}

let server: RedisServer;
let admin: Redis;

beforeAll(async () => {
  server = await startRedisServer(['--maxmemory-policy', 'noeviction']);
  admin = new Redis(server.url);
});

afterAll(async () => {
  admin.disconnect();
  await server.stop();
});

const metric = (text: string, name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1]);

describe('a full Redis', () => {
  it('refuses enqueues with RedisFullError (nothing written), says so in health and metrics, and is drained by a worker started then', async () => {
    const prefix = testPrefix('full');
    const module = await startOpsModule({ connection: server.url, prefix });
    const client = module.get(RedisTaskClient);
    const tasks = new RedisTaskAdmin(client);
    try {
      const used = Number(/^used_memory:(\d+)/m.exec(await admin.info('memory'))?.[1]);
      await admin.config('SET', 'maxmemory', String(used + 4 * 1024 * 1024));
      // Fill it: batches of 1 KB tasks from 20 clients until Redis refuses one.
      let accepted = 0;
      let refused: unknown;
      for (let round = 0; refused === undefined && round < 10_000; round++) {
        const items = Array.from({ length: 50 }, (_, i) => ({
          n: accepted + i,
          fail: (accepted + i) % 97 === 0,
          pad: 'x'.repeat(1_000),
        }));
        try {
          await client.emitBatch('full.work', items);
          accepted += items.length;
        } catch (error) {
          refused = error;
        }
      }
      expect(accepted).toBeGreaterThan(500);
      expect(refused).toBeInstanceOf(RedisFullError);
      expect(refused).toMatchObject({ code: 'REDIS_FULL', written: false, pattern: 'full.work' });
      expect(String((refused as Error).message)).toMatch(/full.*nothing was written.*workers/);
      expect(String((refused as Error).message)).not.toContain('xxxxxxxx');
      const before = await tasks.stats('full.work');
      expect(before.pending.total).toBe(accepted); // the refused batch wrote nothing
      // Redis counts a command's own arguments in the memory it checks: the batch that was refused can leave
      // room for a small task, and the room comes and goes as connection buffers shrink. The limit is set a
      // little under what Redis holds now, so it stays full for whatever comes next until workers drain it.
      const held = Number(/^used_memory:(\d+)/m.exec(await admin.info('memory'))?.[1]);
      await admin.config('SET', 'maxmemory', String(held - 256 * 1024));
      // One emit alone is refused the same way.
      await expect(firstValueFrom(client.emit('full.work', { n: -1 }))).rejects.toBeInstanceOf(RedisFullError);
      expect(await tasks.memory()).toMatchObject({ full: true, readable: true });
      const health = await module
        .get(HealthCheckService)
        .check([() => module.get(RedisTaskHealthIndicator).isHealthy('tasks')])
        .catch((error: { response?: unknown }) => error.response);
      expect(health).toMatchObject({ status: 'error', error: { tasks: { status: 'down', redis: 'full' } } });
      expect(metric(await module.get(RedisTaskMetrics).registry.metrics(), 'redis_tasks_redis_full')).toBe(1);

      // A worker started now (registers, takes its leases, claims, acknowledges, retries, dead-letters) drains it.
      const worker = await startWorker(prefix, [Drain], {
        connection: server.url,
        concurrency: 32,
        prefetch: 16,
        maxAttempts: 2,
        backoff: { type: 'fixed', delayMs: 10 },
        reaperIntervalMs: 100,
      });
      try {
        await waitFor(
          async () => {
            const stats = await tasks.stats('full.work');
            return stats.pending.total === 0 && stats.inFlight.total === 0 && stats.delayed === 0;
          },
          'the backlog drained',
          { timeoutMs: 60_000, intervalMs: 200 },
        );
        expect(handled).toBeGreaterThanOrEqual(accepted);
        const after = await tasks.stats('full.work');
        expect(after.counters.completed + after.counters.deadLettered).toBe(accepted);
        expect(await tasks.memory()).toMatchObject({ full: false });
        expect(metric(await module.get(RedisTaskMetrics).registry.metrics(), 'redis_tasks_redis_full')).toBe(0);
        // Room again: enqueues are taken.
        await firstValueFrom(client.emit('full.work', { n: -2 }));
      } finally {
        await worker.app.close();
      }
    } finally {
      await admin.config('SET', 'maxmemory', '0');
      await module.close();
    }
  }, 120_000);
});
