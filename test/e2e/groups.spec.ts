import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { Ctx, EventPattern, Payload } from '@nestjs/microservices';
import { firstValueFrom } from 'rxjs';
import {
  InvalidOptionError,
  RedisTaskAdmin,
  RedisTaskContext,
  RedisTaskRecordBuilder,
  RedisTaskTransport,
  type RedisTaskClient,
} from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { startProducer, startWorker } from '../support/nest.js';
import { deleteKeys, openRedis, testPrefix, waitFor } from '../support/redis.js';

const redis = openRedis();
const started: { close(): Promise<unknown> }[] = [];
let prefix = '';
/** group -> task key -> runs */
const runs = new Map<string, Map<string, number>>();

@Controller()
class UserCreated {
  @EventPattern<string>('user.created')
  handle(@Payload() payload: { key: string }, @Ctx() ctx: RedisTaskContext): void {
    const group = runs.get(ctx.getGroup()) ?? new Map<string, number>();
    group.set(payload.key, (group.get(payload.key) ?? 0) + 1);
    runs.set(ctx.getGroup(), group);
  }
}

const handledBy = (group: string) => runs.get(group)?.size ?? 0;

afterEach(async () => {
  await Promise.all(started.splice(0).map((app) => app.close()));
  await deleteKeys(redis, prefix);
  runs.clear();
});

afterAll(async () => {
  await redis.quit();
});

async function producer(): Promise<RedisTaskClient> {
  prefix = testPrefix('groups');
  const { client, module } = await startProducer(prefix);
  started.push(module);
  return client;
}

async function worker(group: string, workerId?: string) {
  const app = await startWorker(prefix, [UserCreated], { group, workerId, concurrency: 4 });
  started.push(app.app);
  return app;
}

async function emit(client: RedisTaskClient, from: number, count: number, clients = 3): Promise<void> {
  for (let start = from; start < from + count; start += 1_000) {
    const size = Math.min(1_000, from + count - start);
    await client.emitBatch(
      'user.created',
      Array.from({ length: size }, (_, i) =>
        new RedisTaskRecordBuilder({ key: `u${start + i}` }).setClientId(`c${(start + i) % clients}`).build(),
      ),
    );
  }
}

describe('consumer groups', () => {
  it('delivers each of 5,000 tasks from 3 clients exactly once to each of two groups of two workers', async () => {
    const client = await producer();
    for (const group of ['billing', 'email']) {
      await worker(group, `${group}-1`);
      await worker(group, `${group}-2`);
    }
    await emit(client, 0, 5_000);
    await waitFor(() => handledBy('billing') === 5_000 && handledBy('email') === 5_000, 'both groups', {
      timeoutMs: 60_000,
      intervalMs: 50,
    });
    for (const group of ['billing', 'email']) {
      expect([...runs.get(group)!.values()].every((count) => count === 1)).toBe(true);
    }
    expect([...runs.keys()].sort()).toEqual(['billing', 'email']);
    expect(await new RedisTaskAdmin(client).groups('user.created')).toEqual(['billing', 'email']);
  });

  it('keeps the copies of a stopped group until it starts again, without slowing the other group', async () => {
    const client = await producer();
    const stopped = await worker('analytics');
    await worker('email');
    await stopped.app.close();
    started.splice(started.indexOf(stopped.app), 1);
    await emit(client, 0, 1_000);
    await waitFor(() => handledBy('email') === 1_000, 'the running group', { timeoutMs: 30_000 });
    expect(handledBy('analytics')).toBe(0);
    const admin = new RedisTaskAdmin(client);
    expect((await admin.forGroup('analytics').stats('user.created')).pending.total).toBe(1_000);
    await worker('analytics');
    await waitFor(() => handledBy('analytics') === 1_000, 'the restarted group', { timeoutMs: 30_000 });
  });

  it('gives a group that joins later only the tasks emitted after it registered; removing a group purges and reports its copies', async () => {
    const client = await producer();
    await worker('billing');
    await emit(client, 0, 10, 1);
    await waitFor(() => handledBy('billing') === 10, 'billing');
    const late = await worker('audit');
    await firstValueFrom(client.emit('user.created', { key: 'after' }));
    await waitFor(() => handledBy('audit') === 1 && handledBy('billing') === 11, 'the task emitted after audit joined');
    expect(runs.get('audit')!.has('after')).toBe(true);
    await late.app.close();
    started.splice(started.indexOf(late.app), 1);
    await emit(client, 100, 5, 1);
    const admin = new RedisTaskAdmin(client);
    expect(await admin.removeGroup('user.created', 'audit')).toEqual({
      pending: 5,
      delayed: 0,
      inFlight: 0,
      deadLetters: 0,
    });
    expect(await admin.groups('user.created')).toEqual(['billing']);
    const audit = new PrefixKeys(prefix).queue('user.created').forGroup('audit');
    expect(await redis.exists(audit.ring, audit.pending('c0'), audit.sequence)).toBe(0);
  });

  it('refuses a group name that is empty or contains the key separator, at construction', () => {
    expect(() => new RedisTaskTransport({ group: '' })).toThrow(InvalidOptionError);
    expect(() => new RedisTaskTransport({ group: 'a:b' })).toThrow(
      'option "group" must not contain the key separator ":"',
    );
    expect(() => new RedisTaskAdmin({} as RedisTaskClient).forGroup('x:y')).toThrow(InvalidOptionError);
  });
});
