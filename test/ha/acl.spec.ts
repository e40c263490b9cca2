import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { Redis } from 'ioredis';
import { firstValueFrom } from 'rxjs';
import { aclRule, RedisTaskAdmin } from '../../lib/index.js';
import { startRedisServer, type RedisServer } from '../../scripts/redis-server.mjs';
import { startProducer, startWorker } from '../support/nest.js';
import { testPrefix, waitFor } from '../support/redis.js';

const handled = new Set<string>();

@Controller()
class AclHandlers {
  @EventPattern<string>('acl.task')
  task(@Payload() task: { key: string }): void {
    handled.add(task.key);
  }

  @MessagePattern('acl.sum')
  sum(@Payload() numbers: number[]): number {
    return numbers.reduce((a, b) => a + b, 0);
  }
}

let server: RedisServer;
let admin: Redis;

beforeAll(async () => {
  server = await startRedisServer([]);
  admin = new Redis(server.url);
});

afterAll(async () => {
  admin.disconnect();
  await server.stop();
});

/** Runs a worker, a producer (emit, emitBatch, send, with retries and delays) and the admin API as `user`. */
async function runAs(user: string, prefix: string): Promise<void> {
  const connection = `redis://${user}:pw-${user}@127.0.0.1:${server.port}`;
  const worker = await startWorker(prefix, [AclHandlers], { connection, reaperIntervalMs: 50 }, []);
  const { client, module } = await startProducer(prefix, { connection });
  try {
    const keys = Array.from({ length: 20 }, (_, i) => `${user}-${i}`);
    await client.emitBatch(
      'acl.task',
      keys.slice(0, 10).map((key) => ({ key })),
    );
    for (const key of keys.slice(10)) await firstValueFrom(client.emit('acl.task', { key }));
    expect(await firstValueFrom(client.send('acl.sum', [1, 2, 3]))).toBe(6);
    await waitFor(() => keys.every((key) => handled.has(key)), `every task of ${user} to be handled`);
    const stats = await new RedisTaskAdmin(client).stats('acl.task');
    expect(stats.counters.completed).toBe(20);
    expect(stats.faults).toEqual([]);
  } finally {
    await module.close();
    await worker.app.close();
  }
}

describe('least-privilege Redis ACL users', () => {
  it('runs workers, producers and the admin API as a user limited to the documented commands and to ~prefix:* and &prefix:*', async () => {
    const prefix = testPrefix('acl-least');
    await admin.call('ACL', 'SETUSER', 'least', 'on', '>pw-least', ...aclRule(prefix).split(' '));
    await runAs('least', prefix);
  });

  it('runs under the rule a reader would write (~prefix:* &prefix:* +@all -@dangerous): INFO and CONFIG refused only warn', async () => {
    const prefix = testPrefix('acl-reader');
    await admin.call(
      'ACL',
      'SETUSER',
      'reader',
      'on',
      '>pw-reader',
      `~${prefix}:*`,
      `&${prefix}:*`,
      '+@all',
      '-@dangerous',
    );
    await runAs('reader', prefix);
  });

  it('fails start-up and emits at once with RedisPermissionError for a user whose key pattern does not cover the prefix', async () => {
    const prefix = testPrefix('acl-narrow');
    await admin.call('ACL', 'SETUSER', 'narrow', 'on', '>pw-narrow', '~other:*', '&other:*', '+@all', '-@dangerous');
    const error = await startWorker(prefix, [AclHandlers], {
      connection: `redis://narrow:pw-narrow@127.0.0.1:${server.port}`,
    }).catch((e: unknown) => e);
    expect(error).toMatchObject({ name: 'RedisPermissionError', code: 'REDIS_PERMISSION', prefix });
    expect(String((error as Error).message)).toMatch(/NOPERM .*allow keys ~.*:\* and channels/);
    expect(String((error as Error).message)).not.toContain('pw-narrow');
    const { client, module } = await startProducer(prefix, {
      connection: `redis://narrow:pw-narrow@127.0.0.1:${server.port}`,
    });
    try {
      await expect(client.emitBatch('acl.task', [{ key: 'x' }])).rejects.toMatchObject({
        name: 'RedisPermissionError',
      });
    } finally {
      await module.close();
    }
  });
});

describe('an ACL that refuses one command the claim script uses', () => {
  it('loses no task while LREM is refused (each claimed entry is held before the refused step), and completes all once it is granted', async () => {
    const prefix = testPrefix('acl-lrem');
    await admin.call('ACL', 'SETUSER', 'nolrem', 'on', '>pw-nolrem', ...aclRule(prefix).split(' '), '-lrem');
    const connection = `redis://nolrem:pw-nolrem@127.0.0.1:${server.port}`;
    const worker = await startWorker(prefix, [AclHandlers], {
      connection,
      heartbeatIntervalMs: 100,
      leaseMs: 2_000,
      prefetch: 2,
    });
    const { client, module } = await startProducer(prefix, { connection });
    try {
      const keys = Array.from({ length: 30 }, (_, i) => `lrem-${i}`);
      await client.emitBatch(
        'acl.task',
        keys.map((key, i) => ({ key, tenant: i % 3 })),
      );
      const stats = new RedisTaskAdmin(client);
      // While refused: every task is pending, held by the worker, or handled; none vanished.
      for (let round = 0; round < 10; round++) {
        const now = await stats.stats('acl.task');
        const handledHere = keys.filter((key) => handled.has(key)).length;
        expect(now.pending.total + now.inFlight.total + handledHere).toBeGreaterThanOrEqual(keys.length);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      await admin.call('ACL', 'SETUSER', 'nolrem', '+lrem');
      await waitFor(() => keys.every((key) => handled.has(key)), 'every task once LREM is granted');
      await waitFor(async () => {
        const after = await stats.stats('acl.task');
        return after.pending.total === 0 && after.inFlight.total === 0 && after.deadLetters === 0;
      }, 'nothing left pending, in flight or dead');
    } finally {
      await module.close();
      await worker.app.close();
    }
  });
});
