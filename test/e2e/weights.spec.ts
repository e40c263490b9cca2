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
import { startProducer, startWorker } from '../support/nest.js';
import { deleteKeys, openRedis, testPrefix, waitFor } from '../support/redis.js';

const redis = openRedis();
const started: { close(): Promise<unknown> }[] = [];
let prefix = '';
const order: string[] = [];

@Controller()
class Handlers {
  @EventPattern<string>('weighted')
  handle(@Payload() _payload: unknown, @Ctx() ctx: RedisTaskContext): void {
    order.push(ctx.getClientId());
  }
}

afterEach(async () => {
  await Promise.all(started.splice(0).map((app) => app.close()));
  await deleteKeys(redis, prefix);
  order.length = 0;
});

afterAll(async () => {
  await redis.quit();
});

async function flood(clients: string[], perClient: number): Promise<RedisTaskAdmin> {
  prefix = testPrefix('weights');
  const { client, module } = await startProducer(prefix);
  started.push(module);
  for (const id of clients) {
    for (let start = 0; start < perClient; start += 1_000) {
      await client.emitBatch(
        'weighted',
        Array.from({ length: 1_000 }, (_, n) => new RedisTaskRecordBuilder({ n: start + n }).setClientId(id).build()),
      );
    }
  }
  return new RedisTaskAdmin(client);
}

function share(clientId: string, first: number): number {
  return order.slice(0, first).filter((id) => id === clientId).length / first;
}

describe('weighted fairness', () => {
  it('gives two flooding clients weighted 3:1 (admin API) a 3:1 share of claims over 4,000 tasks, across two workers', async () => {
    const admin = await flood(['heavy', 'light'], 4_000);
    await admin.setClientWeight('weighted', 'heavy', 3);
    expect(await admin.clientWeights('weighted')).toEqual({ heavy: 3 });
    for (const workerId of ['wa', 'wb'])
      started.push((await startWorker(prefix, [Handlers], { workerId, concurrency: 8 })).app);
    await waitFor(() => order.length >= 4_000, '4,000 tasks', { timeoutMs: 30_000 });
    expect(share('heavy', 4_000)).toBeGreaterThanOrEqual(0.75 * 0.9);
    expect(share('heavy', 4_000)).toBeLessThanOrEqual(0.75 * 1.1);
  });

  it('takes weights from the transport option clientWeights, and weight 1 puts a client back to an even share', async () => {
    const admin = await flood(['a', 'b'], 2_000);
    started.push((await startWorker(prefix, [Handlers], { concurrency: 4, clientWeights: { b: 4 } })).app);
    await waitFor(() => order.length >= 1_000, '1,000 tasks', { timeoutMs: 30_000 });
    expect(share('b', 1_000)).toBeGreaterThanOrEqual(0.8 * 0.9);
    await admin.setClientWeight('weighted', 'b', 1);
    expect(await admin.clientWeights('weighted')).toEqual({});
  });

  it('refuses a weight that is not a positive integer, naming it', async () => {
    const admin = await flood(['a'], 0);
    await expect(admin.setClientWeight('weighted', 'a', 0)).rejects.toThrow(InvalidOptionError);
    await expect(admin.setClientWeight('weighted', 'a', -2)).rejects.toThrow(
      'option "weight" must be an integer from 1 to 1000, got -2',
    );
    await expect(admin.setClientWeight('weighted', 'a', 1.5)).rejects.toThrow(InvalidOptionError);
    expect(() => new RedisTaskTransport({ clientWeights: { a: 0 } })).toThrow(
      'option "clientWeights.a" must be an integer from 1 to 1000, got 0',
    );
    expect(() => new RedisTaskTransport({ clientWeights: { 'bad id': 2 } })).toThrow('option "clientWeights.bad id"');
  });
});
