import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { Ctx, EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { Redis } from 'ioredis';
import { firstValueFrom } from 'rxjs';
import { requeueProcessing } from '../../lib/core/redis/requeue.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import {
  InvalidOptionError,
  RedisFullError,
  RedisTaskAdmin,
  RedisTaskClient,
  RedisTaskContext,
  RedisTaskRecordBuilder,
  TaskFailedError,
} from '../../lib/index.js';
import { startRedisServer } from '../../scripts/redis-server.mjs';
import { startProducer, startWorker } from '../support/nest.js';
import { deleteKeys, gate, keysUnder, newestDeadLetter, openRedis, testPrefix, waitFor } from '../support/redis.js';

/**
 * Out-of-line payloads (the client's `outOfLineBytes`, scripts/include/body.lua): a payload over the limit is
 * stored beside its task with a plain SET and read by the worker with a plain GET, never passing through the
 * scripts; it lives exactly as long as its task, whichever way the task moves or ends.
 */
const redis = openRedis();

/** What the handlers got, by task id (each run), and the worker groups that ran each. */
const got = new Map<string, unknown[]>();
const groupsRan = new Map<string, string[]>();
let hold = gate();
let entered = gate();

function record(ctx: RedisTaskContext, payload: unknown): void {
  got.set(ctx.getTaskId(), [...(got.get(ctx.getTaskId()) ?? []), payload]);
}

@Controller()
class Large {
  @EventPattern<string>('big')
  big(@Payload() payload: unknown, @Ctx() ctx: RedisTaskContext): void {
    record(ctx, payload);
  }

  @MessagePattern<string>('big.echo')
  echo(@Payload() payload: { text: string }): number {
    return payload.text.length;
  }

  /** Fails on its first attempt (the retry waits in the delayed set), then succeeds. */
  @EventPattern<string>('big.flaky')
  flaky(@Payload() payload: unknown, @Ctx() ctx: RedisTaskContext): void {
    record(ctx, payload);
    if (ctx.getAttempt() === 1) throw new Error('first attempt fails');
  }

  /** Runs until its run is given up (a cancel aborts its signal). */
  @EventPattern<string>('big.until-cancelled')
  async untilCancelled(@Payload() payload: unknown, @Ctx() ctx: RedisTaskContext): Promise<void> {
    record(ctx, payload);
    entered.open();
    await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
  }

  @EventPattern<string>('big.batch-done')
  batchDone(@Payload() summary: { total: number; succeeded: number }, @Ctx() ctx: RedisTaskContext): void {
    record(ctx, summary);
  }

  @EventPattern<string>('big.dead')
  dead(@Payload() payload: unknown, @Ctx() ctx: RedisTaskContext): void {
    record(ctx, payload);
    throw new Error('always');
  }

  /** Holds its first run until the test opens the gate. */
  @EventPattern<string>('big.held')
  async held(@Payload() payload: unknown, @Ctx() ctx: RedisTaskContext): Promise<void> {
    record(ctx, payload);
    entered.open();
    if (ctx.getAttempt() === 1) await hold.promise;
  }
}

@Controller()
class Grouped {
  @EventPattern<string>('big.groups')
  run(@Payload() payload: { text: string }, @Ctx() ctx: RedisTaskContext): void {
    const ran = groupsRan.get(payload.text.slice(0, 8)) ?? [];
    ran.push(`${ctx.getGroup()}:${payload.text.length}`);
    groupsRan.set(payload.text.slice(0, 8), ran);
  }
}

let prefix = '';
const started: { close(): Promise<unknown> }[] = [];

afterEach(async () => {
  hold.open();
  for (const app of started.splice(0).reverse()) await app.close();
  await deleteKeys(redis, prefix);
  got.clear();
  groupsRan.clear();
  hold = gate();
  entered = gate();
});

afterAll(async () => {
  await redis.quit();
});

/** A payload of about `bytes` bytes, some of it not ASCII (its JSON's length in bytes is what counts). */
function payloadOf(bytes: number, tag = 'p'): { tag: string; text: string; nested: { list: number[] } } {
  return { tag, text: `${tag}:é✓`.padEnd(bytes, 'x'), nested: { list: [1, 2, 3] } };
}

async function setUp(name: string, clientOptions = {}, workerOptions = {}) {
  prefix = testPrefix(name);
  const { client, module } = await startProducer(prefix, clientOptions);
  started.push(module);
  const worker = await startWorker(prefix, [Large], {
    maxAttempts: 2,
    backoff: { type: 'fixed', delayMs: 50 },
    ...workerOptions,
  });
  started.push(worker.app);
  return { client, worker, admin: new RedisTaskAdmin(client), keys: new PrefixKeys(prefix) };
}

async function bodyKeys(): Promise<string[]> {
  return (await keysUnder(redis, prefix)).filter((key) => key.includes(':body:'));
}

async function emit(client: RedisTaskClient, pattern: string, payload: unknown, id?: string) {
  const builder = new RedisTaskRecordBuilder(payload);
  if (id) builder.setId(id);
  return firstValueFrom(client.emit(pattern, builder.build()));
}

describe('out-of-line payloads', () => {
  it('stores a payload over outOfLineBytes beside its task (the entry only names it) and deletes it once the task succeeded', async () => {
    const { client, keys } = await setUp('ool-basic');
    // No worker for this pattern yet: the task waits, and what waits is small.
    const payload = payloadOf(20_000);
    await emit(client, 'big.later', payload, 'w1');
    const [entry] = await redis.lrange(keys.queue('big.later').pending('default'), 0, -1);
    expect(entry.length).toBeLessThan(300);
    expect(entry).toMatch(/,"body":"[A-Za-z0-9_-]+"}$/);
    expect(entry).not.toContain('"payload"');
    const [body] = await bodyKeys();
    expect(JSON.parse((await redis.get(body))!)).toEqual(payload);
    // Kept by the enqueue that wrote its task: no TTL while the task waits.
    expect(await redis.pttl(body)).toBe(-1);

    await emit(client, 'big', payload, 'b1');
    await waitFor(() => got.get('b1')?.length === 1, 'the handler to run');
    expect(got.get('b1')).toEqual([payload]);
    await waitFor(async () => (await bodyKeys()).length === 1, 'the run task’s body to go (the waiting one stays)');
    expect(await bodyKeys()).toEqual([body]);
  });

  it('keeps payloads at or under the limit in the entry, and every payload there with outOfLineBytes: false', async () => {
    const { client, keys } = await setUp('ool-inline', { outOfLineBytes: 1_000 });
    await emit(client, 'big.later', payloadOf(900), 'small');
    await emit(client, 'big.later', payloadOf(1_100), 'large');
    const entries = await redis.lrange(keys.queue('big.later').pending('default'), 0, -1);
    expect(entries.map((entry) => entry.includes('"payload"'))).toEqual([true, false]);

    const off = await startProducer(prefix, { outOfLineBytes: false });
    started.push(off.module);
    await emit(off.client, 'big', payloadOf(50_000), 'off');
    await waitFor(() => got.get('off')?.length === 1, 'the handler to run');
    expect(got.get('off')).toEqual([payloadOf(50_000)]);
    expect(await bodyKeys()).toHaveLength(1); // the waiting 'large' one only
  });

  it('refuses a bad outOfLineBytes at construction, naming the option', () => {
    for (const bad of [0, -1, 1.5, 'big', true]) {
      expect(() => new RedisTaskClient({ outOfLineBytes: bad as never })).toThrow(InvalidOptionError);
      expect(() => new RedisTaskClient({ outOfLineBytes: bad as never })).toThrow(/outOfLineBytes/);
    }
  });

  it('answers send() and runs emitBatch items of both kinds, each with its own payload', async () => {
    const { client } = await setUp('ool-send');
    const text = 'é'.repeat(30_000);
    await expect(firstValueFrom(client.send('big.echo', { text }))).resolves.toBe(30_000);
    const items = [payloadOf(100, 'a'), payloadOf(40_000, 'b'), payloadOf(200, 'c'), payloadOf(9_000, 'd')];
    const receipts = await client.emitBatch(
      'big',
      items.map((item) => new RedisTaskRecordBuilder(item).build()),
    );
    await waitFor(() => receipts.every((receipt) => got.has(receipt.id)), 'every item to run');
    expect(receipts.map((receipt) => got.get(receipt.id))).toEqual(items.map((item) => [item]));
    await waitFor(async () => (await bodyKeys()).length === 0, 'every body to go');
  });

  it('keeps the body through a retry, hands the payload to the dead letter, and a requeued dead letter runs with it', async () => {
    const { client, admin, keys } = await setUp('ool-retry');
    const payload = payloadOf(30_000);
    await emit(client, 'big.flaky', payload, 'f1');
    await waitFor(() => got.get('f1')?.length === 2, 'the retry to run');
    expect(got.get('f1')).toEqual([payload, payload]);

    await emit(client, 'big.dead', payload, 'd1');
    const dead = await newestDeadLetter(redis, keys.queue('big.dead'));
    expect([dead.reason, dead.payload]).toEqual(['failed', payload]);
    await waitFor(
      async () => (await bodyKeys()).length === 0,
      'the bodies to go (the dead letter carries its payload)',
    );
    expect(await admin.requeueDeadLetters('big.dead', 'all')).toEqual({ requeued: 1, skipped: 0 });
    await waitFor(() => got.get('d1')?.length === 4, 'the requeued task to run its two attempts');
    expect(got.get('d1')).toEqual([payload, payload, payload, payload]);
  });

  it('deletes the body of a tracked task cancelled while it runs, and of a batch’s tasks as they settle', async () => {
    const { client, admin } = await setUp('ool-cancel');
    const running = new RedisTaskRecordBuilder(payloadOf(30_000)).setTracked(true).build();
    const { id } = await firstValueFrom(client.emit('big.until-cancelled', running));
    await entered.promise;
    expect(await bodyKeys()).toHaveLength(1);
    expect(await admin.cancel('big.until-cancelled', id, 'not needed')).toEqual({ cancelled: true, was: 'running' });
    await waitFor(async () => (await bodyKeys()).length === 0, 'the cancelled task’s body to go');

    const batch = client.batch({ id: 'big-batch', onComplete: { pattern: 'big.batch-done' } });
    await batch.add(
      'big',
      Array.from({ length: 6 }, (_, n) => payloadOf(12_000 + n, `batch-${n}`)),
    );
    await batch.seal();
    await waitFor(() => got.has('batch.big-batch.complete'), 'the batch callback');
    expect(got.get('batch.big-batch.complete')).toEqual([expect.objectContaining({ total: 6, succeeded: 6 })]);
    const payloads = [...got.values()].flat().filter((value) => (value as { tag?: string }).tag?.startsWith('batch-'));
    expect(payloads).toHaveLength(6);
    await waitFor(async () => (await bodyKeys()).length === 0, 'the batch tasks’ bodies to go');
  });

  it('keeps the body of a task taken back from a worker that stopped answering, for the run that follows', async () => {
    const { client, worker, keys } = await setUp('ool-recover');
    const payload = payloadOf(25_000);
    await emit(client, 'big.held', payload, 'h1');
    await entered.promise;
    // What a reaper does once the worker's lease expired (a worker killed with kill -9): the task goes back.
    await requeueProcessing(
      redis,
      keys.queue('big.held'),
      { workerId: worker.transport.options.workerId, deadLetterCap: 10, resultTtlMs: 1_000 },
      { countAttempt: true },
    );
    await waitFor(() => got.get('h1')?.length === 2, 'the recovered run');
    expect(got.get('h1')).toEqual([payload, payload]);
    hold.open();
    await waitFor(async () => (await bodyKeys()).length === 0, 'the body to go once the run succeeded');
  });

  it('gives each consumer group its own copy, each deleted when that group is done with it', async () => {
    prefix = testPrefix('ool-groups');
    const { client, module } = await startProducer(prefix);
    started.push(module);
    for (const group of ['billing', 'audit']) {
      const worker = await startWorker(prefix, [Grouped], { group });
      started.push(worker.app);
    }
    const payload = payloadOf(20_000, 'groups01');
    await emit(client, 'big.groups', payload);
    await waitFor(() => groupsRan.get('groups01')?.length === 2, 'both groups to run it');
    expect(groupsRan.get('groups01')!.sort()).toEqual(['audit:20000', 'billing:20000']);
    await waitFor(async () => (await bodyKeys()).length === 0, 'every copy to go');
  });

  it('dead-letters a task whose body is gone or is not a string (reason malformed, the caller told), and goes on', async () => {
    const { client, admin, keys } = await setUp('ool-gone');
    // A paused pattern holds its tasks while their bodies are taken away: one deleted, one made a stray hash.
    await admin.pause('big.echo');
    const gone = firstValueFrom(client.send('big.echo', { text: 'x'.repeat(20_000) }));
    const stray = firstValueFrom(client.send('big.echo', { text: 'z'.repeat(20_000) }));
    await waitFor(async () => (await bodyKeys()).length === 2, 'both bodies stored');
    const [first, second] = await bodyKeys();
    await redis.del(first);
    await redis.del(second);
    await redis.hset(second, 'stray', '1');
    await admin.resume('big.echo');
    for (const answer of [gone, stray]) {
      const error = await answer.then(
        () => undefined,
        (thrown: unknown) => thrown,
      );
      expect(error).toBeInstanceOf(TaskFailedError);
      expect((error as TaskFailedError).message).toMatch(/stored out of line/);
    }
    const records = (await redis.lrange(keys.queue('big.echo').deadLetters, 0, -1)).map(
      (raw) => JSON.parse(raw) as { reason: string; error?: { code?: string }; payload?: unknown },
    );
    expect(records.map((record) => [record.reason, record.error?.code, 'payload' in record])).toEqual([
      ['malformed', 'PAYLOAD_LOST', false],
      ['malformed', 'PAYLOAD_LOST', false],
    ]);
    // The worker goes on: the next task runs. The names are the tasks' own: what held them went with the tasks.
    await expect(firstValueFrom(client.send('big.echo', { text: 'y'.repeat(20_000) }))).resolves.toBe(20_000);
    expect(await bodyKeys()).toEqual([]);
  });
});

describe('out-of-line payloads against a full Redis', () => {
  it('refuses the emit with RedisFullError when the body cannot be stored, and writes nothing', async () => {
    const server = await startRedisServer(['--maxmemory-policy', 'noeviction']);
    const admin = new Redis(server.url);
    prefix = '';
    const own = testPrefix('ool-full');
    const { client, module } = await startProducer(own, { connection: server.url });
    try {
      await emit(client, 'big', payloadOf(100));
      const used = Number(/^used_memory:(\d+)/m.exec(await admin.info('memory'))?.[1]);
      await admin.config('SET', 'maxmemory', String(used + 256 * 1024));
      // Fill it with small tasks until Redis refuses one, then a large one is refused too.
      let refused: unknown;
      for (let n = 0; refused === undefined && n < 100_000; n++) {
        await emit(client, 'big', payloadOf(2_000)).catch((error: unknown) => (refused = error));
      }
      expect(refused).toBeInstanceOf(RedisFullError);
      const tasksBefore = await admin.llen(new PrefixKeys(own).queue('big').pending('default'));
      await expect(emit(client, 'big', payloadOf(50_000))).rejects.toBeInstanceOf(RedisFullError);
      // Several bodies stored for one call (an emitBatch; the emits of one event-loop turn alike): refused whole.
      const batch = [payloadOf(50_000, 'a'), payloadOf(60_000, 'b'), payloadOf(70_000, 'c')];
      await expect(
        client.emitBatch(
          'big',
          batch.map((item) => new RedisTaskRecordBuilder(item).build()),
        ),
      ).rejects.toBeInstanceOf(RedisFullError);
      const together = await Promise.allSettled(batch.map((item) => emit(client, 'big', item)));
      expect(
        together.map((outcome) => outcome.status === 'rejected' && outcome.reason instanceof RedisFullError),
      ).toEqual([true, true, true]);
      expect(await admin.llen(new PrefixKeys(own).queue('big').pending('default'))).toBe(tasksBefore);
      expect((await keysUnder(admin, own)).filter((key) => key.includes(':body:'))).toEqual([]);
    } finally {
      await module.close();
      admin.disconnect();
      await server.stop();
    }
  });
});
