import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { Ctx, EventPattern, Payload } from '@nestjs/microservices';
import { PrefixKeys, RedisTaskContext, RedisTaskRecordBuilder } from '../../lib/index.js';
import { startProducer, startWorker } from '../support/nest.js';
import { deleteKeys, openRedis, testPrefix, waitFor } from '../support/redis.js';

const redis = openRedis();
const started: { close(): Promise<unknown> }[] = [];
let prefix = '';
const starts: { clientId: string; n: number }[] = [];

@Controller()
class Tenants {
  @EventPattern<string>('tenant.job')
  async job(@Payload() payload: { n: number }, @Ctx() ctx: RedisTaskContext): Promise<void> {
    starts.push({ clientId: ctx.getClientId(), n: payload.n });
    await new Promise((resolve) => setImmediate(resolve));
  }
}

afterEach(async () => {
  await Promise.all(started.splice(0).map((app) => app.close()));
  await deleteKeys(redis, prefix);
  starts.length = 0;
});

describe('fairness across clients', () => {
  it("runs a second client's task before the flooding client's next 10, with 5,000 of the first pending", async () => {
    prefix = testPrefix('fair');
    const { client, module } = await startProducer(prefix, { clientId: 'flood' });
    started.push(module);
    await client.emitBatch(
      'tenant.job',
      Array.from({ length: 5_000 }, (_, n) => ({ n })),
    );
    const pending = new PrefixKeys(prefix).queue('tenant.job').pending('flood');
    expect(await redis.llen(pending)).toBe(5_000);

    const worker = await startWorker(prefix, [Tenants], { concurrency: 4, prefetch: 4 });
    started.push(worker.app);
    await waitFor(() => starts.length >= 200, 'the flood to be under way');
    const floodStartsBefore = starts.length;
    await client.emitBatch('tenant.job', [new RedisTaskRecordBuilder({ n: -1 }).setClientId('quiet').build()]);

    await waitFor(() => starts.some((start) => start.clientId === 'quiet'), "the quiet client's task to start");
    const quietIndex = starts.findIndex((start) => start.clientId === 'quiet');
    const floodTasksInBetween = quietIndex - floodStartsBefore;
    expect(floodTasksInBetween).toBeLessThan(10);
    expect(await redis.llen(pending)).toBeGreaterThan(3_000); // the flood was still deep when "quiet" ran
  });
});

afterAll(async () => {
  await redis.quit();
});
