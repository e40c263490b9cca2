import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { Ctx, EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { firstValueFrom } from 'rxjs';
import type { DeadLetterRecord } from '../../lib/core/model/dead-letter.js';
import {
  DuplicateTaskError,
  InvalidTaskError,
  PayloadTooLargeError,
  RedisTaskClient,
  RedisTaskContext,
  RedisTaskRecordBuilder,
  RedisTaskTransport,
} from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { startProducer, startWorker, type Worker } from '../support/nest.js';
import { deleteKeys, keysUnder, openRedis, testPrefix, waitFor } from '../support/redis.js';

const redis = openRedis();
const runs: { pattern: string; payload: { n: number }; startedAt: number; clientId: string }[] = [];
const inFlight = new Map<string, number>();
const peak = { perClient: 0, overall: 0 };

@Controller()
class Handlers {
  @EventPattern<string>('ordered')
  ordered(@Payload() payload: { n: number }, @Ctx() ctx: RedisTaskContext): void {
    runs.push({ pattern: 'ordered', payload, startedAt: Date.now(), clientId: ctx.getClientId() });
  }

  @EventPattern<string>('per.client', { clientConcurrency: 1 })
  async perClient(@Payload() payload: { n: number }, @Ctx() ctx: RedisTaskContext): Promise<void> {
    const clientId = ctx.getClientId();
    const running = (inFlight.get(clientId) ?? 0) + 1;
    inFlight.set(clientId, running);
    peak.perClient = Math.max(peak.perClient, running);
    peak.overall = Math.max(
      peak.overall,
      [...inFlight.values()].reduce((a, b) => a + b, 0),
    );
    runs.push({ pattern: 'per.client', payload, startedAt: Date.now(), clientId });
    await new Promise((resolve) => setTimeout(resolve, 5)); // work that keeps the task in flight
    inFlight.set(clientId, running - 1);
  }

  @MessagePattern('priced')
  priced(@Payload() payload: { n: number }): number {
    runs.push({ pattern: 'priced', payload, startedAt: Date.now(), clientId: '' });
    return payload.n * 10;
  }
}

let prefix = '';
let keys: PrefixKeys;
const started: { close(): Promise<unknown> }[] = [];

function fresh(name: string): void {
  prefix = testPrefix(name);
  keys = new PrefixKeys(prefix);
}

async function worker(options = {}): Promise<Worker> {
  const w = await startWorker(prefix, [Handlers], { concurrency: 1, prefetch: 1, ...options });
  started.push(w.app);
  return w;
}

async function producer(options = {}): Promise<RedisTaskClient> {
  const { client, module } = await startProducer(prefix, { reaperIntervalMs: false, ...options } as never);
  started.push(module);
  return client;
}

function runsOf(pattern: string) {
  return runs.filter((run) => run.pattern === pattern);
}

function record(n: number) {
  return new RedisTaskRecordBuilder({ n });
}

afterEach(async () => {
  await Promise.all(started.splice(0).map((app) => app.close()));
  await deleteKeys(redis, prefix);
  if (keys) await redis.del(keys.queues);
  runs.length = 0;
  inFlight.clear();
  peak.perClient = 0;
  peak.overall = 0;
});

afterAll(async () => {
  await redis.quit();
});

describe('setPriority', () => {
  it('runs higher priorities first within a client, equal priorities and plain tasks in enqueue order', async () => {
    fresh('priority');
    const client = await producer();
    await client.emitBatch('ordered', [
      record(1).build(),
      record(2).setPriority(1).build(),
      record(3).setPriority(50).build(),
      record(4).build(),
      record(5).setPriority(50).build(),
      record(6).setPriority(1).build(),
    ]);
    await worker();
    await waitFor(() => runsOf('ordered').length === 6, 'six runs');
    expect(runsOf('ordered').map((run) => run.payload.n)).toEqual([3, 5, 2, 6, 1, 4]);
  });

  it('keeps clients fair: a client with high priorities does not starve another client', async () => {
    fresh('priority-fair');
    const client = await producer();
    await client.emitBatch('ordered', [
      ...[1, 2, 3].map((n) => record(n).setClientId('big').setPriority(100).build()),
      record(4).setClientId('small').build(),
    ]);
    await worker();
    await waitFor(() => runsOf('ordered').length === 4, 'four runs');
    expect(runsOf('ordered').map((run) => run.clientId)).toEqual(['big', 'small', 'big', 'big']);
  });

  it('refuses a negative, fractional or non-numeric priority', () => {
    expect(() => record(1).setPriority(-1)).toThrow(/setPriority\(\) needs an integer from 0/);
    expect(() => record(1).setPriority(1.5)).toThrow(InvalidTaskError);
    expect(() => record(1).setPriority('high' as never)).toThrow(/"high"/);
  });
});

describe('setDelay / setRunAt', () => {
  it('keeps a delayed task in Redis until its time, then runs it without waiting for a reaper sweep', async () => {
    fresh('delay');
    const client = await producer();
    // A sweep interval far longer than the test: only the due-time promotion can run these in time.
    await worker({ reaperIntervalMs: 600_000 });
    const emittedAt = Date.now();
    await firstValueFrom(client.emit('ordered', record(1).setDelay(300).build()));
    await firstValueFrom(
      client.emit(
        'ordered',
        record(2)
          .setRunAt(new Date(emittedAt + 150))
          .build(),
      ),
    );
    await firstValueFrom(client.emit('ordered', { n: 3 }));
    expect(await redis.zcard(keys.queue('ordered').delayed)).toBe(2);
    await waitFor(() => runsOf('ordered').length === 3, 'three runs', { timeoutMs: 5_000 });
    expect(runsOf('ordered').map((run) => run.payload.n)).toEqual([3, 2, 1]);
    const [, second, third] = runsOf('ordered');
    expect(second.startedAt - emittedAt).toBeGreaterThanOrEqual(150 - 5);
    expect(third.startedAt - emittedAt).toBeGreaterThanOrEqual(300 - 5);
    expect(await redis.zcard(keys.queue('ordered').delayed)).toBe(0);
  });

  it('promotes delayed tasks emitted while no worker ran, once a worker starts', async () => {
    fresh('delay-offline');
    const client = await producer();
    await firstValueFrom(client.emit('ordered', record(1).setDelay(50).build()));
    await worker({ reaperIntervalMs: false });
    await waitFor(() => runsOf('ordered').length === 1, 'the delayed run');
  });

  it('runs a task whose runAt is already past at once', async () => {
    fresh('runat-past');
    const client = await producer();
    await firstValueFrom(
      client.emit(
        'ordered',
        record(1)
          .setRunAt(Date.now() - 60_000)
          .build(),
      ),
    );
    expect(await redis.zcard(keys.queue('ordered').delayed)).toBe(0);
    expect(await redis.llen(keys.queue('ordered').pending('default'))).toBe(1);
  });

  it('refuses a negative or non-numeric delay and a runAt that is not a time', () => {
    expect(() => record(1).setDelay(-1)).toThrow(/setDelay\(\) needs a non-negative number/);
    expect(() => record(1).setDelay('soon' as never)).toThrow(InvalidTaskError);
    expect(() => record(1).setDelay(Number.NaN)).toThrow(InvalidTaskError);
    expect(() => record(1).setRunAt(new Date('not a date'))).toThrow(/setRunAt\(\) needs a Date/);
  });
});

describe('setExpiresIn / setExpiresAt', () => {
  it('does not run a task that expired before a worker started it: dead letters, reason expired', async () => {
    fresh('expiry');
    const client = await producer();
    const { id } = await firstValueFrom(client.emit('ordered', record(1).setExpiresIn(30).build()));
    await firstValueFrom(
      client.emit(
        'ordered',
        record(2)
          .setExpiresAt(Date.now() + 60_000)
          .build(),
      ),
    );
    const queue = keys.queue('ordered');
    const expiresAt = Date.now() + 30;
    await waitFor(() => Date.now() > expiresAt, 'the expiry to pass');
    await worker();
    await waitFor(() => runsOf('ordered').length === 1, 'the live task to run');
    const dead = await waitFor(async () => {
      const list = await redis.lrange(queue.deadLetters, 0, -1);
      return list.length === 1 ? (JSON.parse(list[0]) as DeadLetterRecord) : undefined;
    }, 'the expired task in dead letters');
    expect(dead).toMatchObject({ id, reason: 'expired', payload: { n: 1 }, attempts: 0 });
    expect(runsOf('ordered').map((run) => run.payload.n)).toEqual([2]);
  });

  it('refuses an expiry in the past, a non-positive expiresIn, and an expiry before the delay ends', async () => {
    fresh('expiry-bad');
    expect(() => record(1).setExpiresAt(Date.now() - 1)).toThrow(/setExpiresAt\(\) got a time in the past/);
    expect(() => record(1).setExpiresIn(0)).toThrow(/setExpiresIn\(\) needs a positive number/);
    expect(() => record(1).setExpiresIn(-5)).toThrow(InvalidTaskError);
    const client = await producer();
    await expect(
      firstValueFrom(client.emit('ordered', record(1).setDelay(10_000).setExpiresIn(1_000).build())),
    ).rejects.toThrow(/would expire before its delay ends/);
    expect(await keysUnder(redis, prefix)).toEqual([]);
  });
});

describe('setDeduplicationKey', () => {
  it('refuses a second live task with the same key as a duplicate (not an error), and frees the key once the task completes', async () => {
    fresh('dedup');
    const client = await producer();
    const first = await firstValueFrom(client.emit('ordered', record(1).setDeduplicationKey('avatar:42').build()));
    const second = await firstValueFrom(client.emit('ordered', record(2).setDeduplicationKey('avatar:42').build()));
    expect(first.duplicate).toBe(false);
    expect(second).toEqual({ id: first.id, duplicate: true });
    expect(await redis.llen(keys.queue('ordered').pending('default'))).toBe(1);
    await worker();
    await waitFor(() => runsOf('ordered').length === 1, 'the first task to run');
    await waitFor(
      async () => (await redis.exists(keys.queue('ordered').dedup('avatar:42'))) === 0,
      'the key to be freed',
    );
    const third = await firstValueFrom(client.emit('ordered', record(3).setDeduplicationKey('avatar:42').build()));
    expect(third.duplicate).toBe(false);
    await waitFor(() => runsOf('ordered').length === 2, 'the third task to run');
    expect(runsOf('ordered').map((run) => run.payload.n)).toEqual([1, 3]);
  });

  it('keeps the key after a success with keepAfterSuccess: a second emit within the TTL is refused, one after it runs', async () => {
    fresh('dedup-keep');
    const client = await producer();
    const keep = (n: number) => record(n).setDeduplicationKey('digest:7', { ttlMs: 1_500, keepAfterSuccess: true });
    const first = await firstValueFrom(client.emit('ordered', keep(1).build()));
    await worker();
    await waitFor(() => runsOf('ordered').length === 1, 'the first task to run');
    const key = keys.queue('ordered').dedup('digest:7');
    await waitFor(
      async () => (await redis.hget(keys.queue('ordered').counters, 'completed')) === '1',
      'the first task to be acknowledged',
    );
    expect(await redis.get(key)).toBe(first.id);
    expect(await firstValueFrom(client.emit('ordered', keep(2).build()))).toEqual({ id: first.id, duplicate: true });
    await waitFor(async () => (await redis.exists(key)) === 0, 'the key to lapse after its TTL', { timeoutMs: 5_000 });
    expect((await firstValueFrom(client.emit('ordered', keep(3).build()))).duplicate).toBe(false);
    await waitFor(() => runsOf('ordered').length === 2, 'the third task to run');
    expect(runsOf('ordered').map((run) => run.payload.n)).toEqual([1, 3]);
    expect(() => record(4).setDeduplicationKey('k', { keepAfterSuccess: 'yes' as never })).toThrow(
      /keepAfterSuccess needs true or false/,
    );
  });

  it('derives the key from a hash of the payload (object key order does not matter)', async () => {
    fresh('dedup-hash');
    const client = await producer();
    const receipts = await client.emitBatch('ordered', [
      new RedisTaskRecordBuilder({ n: 1, user: { id: 7, size: 'L' } }).setDeduplicationKey().build(),
      new RedisTaskRecordBuilder({ user: { size: 'L', id: 7 }, n: 1 }).setDeduplicationKey().build(),
      new RedisTaskRecordBuilder({ n: 2, user: { id: 7, size: 'L' } }).setDeduplicationKey().build(),
    ]);
    expect(receipts.map((receipt) => receipt.duplicate)).toEqual([false, true, false]);
    expect(receipts[1].id).toBe(receipts[0].id);
  });

  it('lets the key lapse after its TTL even if the task never ran', async () => {
    fresh('dedup-ttl');
    const client = await producer();
    await firstValueFrom(client.emit('ordered', record(1).setDeduplicationKey('k', { ttlMs: 50 }).build()));
    await waitFor(async () => (await redis.exists(keys.queue('ordered').dedup('k'))) === 0, 'the key to expire');
    const again = await firstValueFrom(client.emit('ordered', record(2).setDeduplicationKey('k').build()));
    expect(again.duplicate).toBe(false);
    expect(await redis.llen(keys.queue('ordered').pending('default'))).toBe(2);
  });

  it('fails a send() whose key a live task holds with DuplicateTaskError, instead of waiting for a reply that cannot come', async () => {
    fresh('dedup-send');
    const client = await producer();
    const first = await firstValueFrom(client.emit('priced', record(1).setDeduplicationKey('quote:1').build()));
    await expect(
      firstValueFrom(client.send('priced', record(1).setDeduplicationKey('quote:1').build())),
    ).rejects.toMatchObject({
      code: 'DUPLICATE',
      holderId: first.id,
    });
    await expect(
      firstValueFrom(client.send('priced', record(1).setDeduplicationKey('quote:1').build())),
    ).rejects.toBeInstanceOf(DuplicateTaskError);
  });

  it('refuses an empty key and a bad TTL', () => {
    expect(() => record(1).setDeduplicationKey('')).toThrow(
      /setDeduplicationKey\(\) needs a string of 1 to 512 characters/,
    );
    expect(() => record(1).setDeduplicationKey('k', { ttlMs: 0 })).toThrow(/ttlMs/);
  });
});

describe('emitBatch', () => {
  it('enqueues payloads and records with their own client ids, in order, one round trip per chunk', async () => {
    fresh('batch');
    const client = await producer({ batchChunkSize: 100 });
    const redisOfClient = client.unwrap<typeof redis>();
    const original = redisOfClient.enqueueTasks.bind(redisOfClient);
    let calls = 0;
    redisOfClient.enqueueTasks = (...args: Parameters<typeof original>) => {
      calls++;
      return original(...args);
    };
    const items = Array.from({ length: 250 }, (_, n) =>
      n % 2 === 0
        ? { n }
        : record(n)
            .setClientId(`tenant-${n % 3}`)
            .build(),
    );
    const receipts = await client.emitBatch('ordered', items);
    expect(calls).toBe(3);
    expect(receipts).toHaveLength(250);
    expect(new Set(receipts.map((receipt) => receipt.id)).size).toBe(250);
    const queue = keys.queue('ordered');
    const counts = await Promise.all(
      ['default', 'tenant-0', 'tenant-1', 'tenant-2'].map((id) => redis.llen(queue.pending(id))),
    );
    expect(counts.reduce((a, b) => a + b, 0)).toBe(250);
    expect(counts[0]).toBe(125);
  });

  it('rejects a batch with one invalid item as a whole, naming its index, with nothing enqueued', async () => {
    fresh('batch-bad');
    const client = await producer({ maxPayloadBytes: 100 });
    const circular: Record<string, unknown> = {};
    circular.self = circular;
    await expect(client.emitBatch('ordered', [{ n: 1 }, { n: 2 }, circular])).rejects.toMatchObject({
      code: 'INVALID_TASK',
      index: 2,
      message: expect.stringMatching(/item 2's payload cannot be serialized/),
    });
    await expect(client.emitBatch('ordered', [{ n: 1 }, { blob: 'x'.repeat(200) }])).rejects.toBeInstanceOf(
      PayloadTooLargeError,
    );
    await expect(client.emitBatch('ordered', [{ n: 1 }, { blob: 'x'.repeat(200) }])).rejects.toThrow(
      /item 1's payload is \d+ bytes/,
    );
    const tooLate = new RedisTaskRecordBuilder({ n: 3 }).build();
    (tooLate.options as { expiresAt?: number }).expiresAt = Date.now() - 1_000;
    await expect(client.emitBatch('ordered', [{ n: 1 }, { n: 2 }, { n: 3 }, tooLate])).rejects.toThrow(
      /item 3: the task expired before it was enqueued/,
    );
    await expect(client.emitBatch('ordered', 'nope' as never)).rejects.toThrow(/emitBatch\(\) needs an array/);
    expect(await keysUnder(redis, prefix)).toEqual([]);
  });

  it('refuses a payload over maxPayloadBytes from emit, writing nothing', async () => {
    fresh('too-large');
    const client = await producer({ maxPayloadBytes: 64 });
    await expect(firstValueFrom(client.emit('ordered', { blob: 'x'.repeat(100) }))).rejects.toThrow(
      /over the maxPayloadBytes limit of 64/,
    );
    expect(await keysUnder(redis, prefix)).toEqual([]);
  });
});

describe('emit() Observable', () => {
  it('enqueues without a subscriber; every subscriber, before or after the answer, gets the one receipt', async () => {
    fresh('emit-observable');
    const client = await producer();
    const unsubscribed = client.emit('ordered', { n: 1 });
    const early = client.emit('ordered', { n: 2 });
    const first = firstValueFrom(early);
    const second = firstValueFrom(early);
    const [a, b] = await Promise.all([first, second]);
    expect(a).toEqual(b);
    expect(a).toMatchObject({ duplicate: false });
    await waitFor(
      async () => (await redis.llen(keys.queue('ordered').pending('default'))) === 2,
      'both tasks in Redis',
    );
    // Subscribed after Redis answered: the same receipt, and the task is not sent again.
    const late = await firstValueFrom(unsubscribed);
    expect(late).toEqual(await firstValueFrom(unsubscribed));
    expect(await redis.llen(keys.queue('ordered').pending('default'))).toBe(2);
  });

  it('keeps a refused emit nobody subscribed to from becoming an unhandled rejection, and tells a late subscriber why', async () => {
    fresh('emit-refused');
    const client = await producer({ maxPayloadBytes: 64 });
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      const refused = client.emit('ordered', { blob: 'x'.repeat(100) });
      await firstValueFrom(client.emit('ordered', { n: 1 })); // a later emit answered: the refusal was settled before it
      await new Promise((resolve) => setImmediate(resolve));
      expect(unhandled).toEqual([]);
      await expect(firstValueFrom(refused)).rejects.toThrow(/over the maxPayloadBytes limit of 64/);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });
});

describe('per-client concurrency cap', () => {
  it("with clientConcurrency 1 runs each client's tasks one at a time in enqueue order, while other clients proceed", async () => {
    fresh('client-cap');
    const client = await producer();
    const clients = ['acme', 'globex', 'initech'];
    await client.emitBatch(
      'per.client',
      Array.from({ length: 30 }, (_, n) =>
        record(n)
          .setClientId(clients[n % 3])
          .build(),
      ),
    );
    // Two workers, so the cap must hold across processes' worth of slots, not just within one worker.
    await worker({ concurrency: 4 });
    await worker({ concurrency: 4 });
    await waitFor(() => runsOf('per.client').length === 30, 'thirty runs');
    expect(peak.perClient).toBe(1);
    expect(peak.overall).toBeGreaterThan(1);
    for (const id of clients) {
      const order = runsOf('per.client')
        .filter((run) => run.clientId === id)
        .map((run) => run.payload.n);
      expect(order).toEqual([...order].sort((a, b) => a - b));
      expect(order).toHaveLength(10);
    }
    const queue = keys.queue('per.client');
    await waitFor(
      async () => (await redis.exists(queue.inflight, queue.counted, queue.parked)) === 0,
      'the cap bookkeeping to empty',
    );
  });

  it('refuses a bad clientConcurrency, naming the option', () => {
    expect(() => new RedisTaskTransport({ clientConcurrency: -1 })).toThrow(/option "clientConcurrency"/);
  });
});

describe('setMaxAttempts', () => {
  it('refuses zero, negative and non-numeric attempts', () => {
    expect(() => record(1).setMaxAttempts(0)).toThrow(/setMaxAttempts\(\)/);
    expect(() => record(1).setMaxAttempts(-2)).toThrow(InvalidTaskError);
    expect(() => record(1).setMaxAttempts('3' as never)).toThrow(InvalidTaskError);
  });
});
