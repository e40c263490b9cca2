import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { Ctx, EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { firstValueFrom, lastValueFrom } from 'rxjs';
import { DeadLetterTaskError, RedisTaskContext, RedisTaskRecordBuilder, TaskFailedError } from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import type { DeadLetterRecord } from '../../lib/core/model/dead-letter.js';
import { startProducer, startWorker } from '../support/nest.js';
import { deleteKeys, openRedis, testPrefix, waitFor } from '../support/redis.js';

// No handler can make a task loop for ever or take its worker down: a thrown value that throws when
// looked at ends in dead letters, late control calls answer false, and every text into a record is capped.

const redis = openRedis();
const apps: { close(): Promise<unknown> }[] = [];
let prefix = '';
const runs = new Map<string, number>();
let saved: RedisTaskContext | undefined;

function ran(key: string): void {
  runs.set(key, (runs.get(key) ?? 0) + 1);
}

@Controller()
class Hostile {
  @MessagePattern<string>('hostile.proxy')
  proxy(@Payload() payload: { key: string }): never {
    ran(payload.key);
    throw new Proxy(new Error('hidden'), {
      getPrototypeOf() {
        throw new Error('trap');
      },
    });
  }

  @EventPattern<string>('hostile.late')
  late(@Payload() payload: { key: string }, @Ctx() ctx: RedisTaskContext): void {
    ran(payload.key);
    saved = ctx;
  }

  @EventPattern<string>('hostile.huge')
  huge(@Payload() payload: { key: string }): never {
    ran(payload.key);
    throw new DeadLetterTaskError('y'.repeat(5_000_000));
  }
}

afterEach(async () => {
  await Promise.all(apps.splice(0).map((app) => app.close()));
  await deleteKeys(redis, prefix);
  runs.clear();
  saved = undefined;
});

afterAll(async () => {
  await redis.quit();
});

describe('hostile handlers', () => {
  it('sends a task whose handler throws a Proxy that throws when inspected to dead letters within maxAttempts; the send() caller hears', async () => {
    prefix = testPrefix('hostile-proxy');
    const { client, module } = await startProducer(prefix, { replyTimeoutMs: 20_000 });
    apps.push(module);
    const worker = await startWorker(prefix, [Hostile], {
      workerId: 'hostile-w',
      heartbeatIntervalMs: 100,
      leaseMs: 1_000,
    });
    apps.push(worker.app);
    const answer = lastValueFrom(
      client.send('hostile.proxy', new RedisTaskRecordBuilder({ key: 'p' }).setMaxAttempts(2).build()),
    ).catch((error: unknown) => error);
    const error = await answer;
    expect(error).toBeInstanceOf(TaskFailedError);
    const queue = new PrefixKeys(prefix).queue('hostile.proxy');
    const [raw] = await redis.lrange(queue.deadLetters, 0, 0);
    const record = JSON.parse(raw) as DeadLetterRecord;
    expect(['failed', 'interrupted']).toContain(record.reason);
    expect(runs.get('p')).toBeLessThanOrEqual(2);
    // Nothing runs it again: no pending, delayed or held copy is left.
    await new Promise((resolve) => setTimeout(resolve, 400));
    expect(runs.get('p')).toBeLessThanOrEqual(2);
    expect(await redis.hlen(queue.processing('hostile-w'))).toBe(0);
    expect(await redis.zcard(queue.delayed)).toBe(0);
  });

  it('answers late control calls (a timer after the run ended) with false: no throw, no rejection, nothing applied', async () => {
    prefix = testPrefix('hostile-late');
    const { client, module } = await startProducer(prefix);
    apps.push(module);
    const worker = await startWorker(prefix, [Hostile], { workerId: 'late-w' });
    apps.push(worker.app);
    await firstValueFrom(client.emit('hostile.late', { key: 'l' }));
    await waitFor(() => saved !== undefined, 'the run');
    const queue = new PrefixKeys(prefix).queue('hostile.late');
    await waitFor(async () => (await redis.hget(queue.counters, 'completed')) === '1', 'the run to complete');
    const ctx = saved as RedisTaskContext;
    expect(ctx.retry({ delayMs: 10 })).toBe(false);
    expect(ctx.deadLetter('too late')).toBe(false);
    await expect(ctx.extendLease(1_000)).resolves.toBe(false);
    expect(await redis.zcard(queue.delayed)).toBe(0);
    expect(await redis.llen(queue.deadLetters)).toBe(0);
    expect(runs.get('l')).toBe(1);
  });

  it('caps a 5 MB DeadLetterTaskError message in the record (one cap for every path into a record)', async () => {
    prefix = testPrefix('hostile-huge');
    const { client, module } = await startProducer(prefix);
    apps.push(module);
    const worker = await startWorker(prefix, [Hostile], { workerId: 'huge-w' });
    apps.push(worker.app);
    await firstValueFrom(client.emit('hostile.huge', { key: 'h' }));
    const queue = new PrefixKeys(prefix).queue('hostile.huge');
    const raw = await waitFor(async () => (await redis.lrange(queue.deadLetters, 0, 0))[0], 'the dead letter');
    expect(raw.length).toBeLessThan(20_000);
    const record = JSON.parse(raw) as DeadLetterRecord;
    expect(record.reason).toBe('rejected');
    expect(record.detail).toMatch(/^y{4096}… \(4995904 more characters\)$/);
  });
});
