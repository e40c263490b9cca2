import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Redis } from 'ioredis';
import { firstValueFrom } from 'rxjs';
import { decodeEntry } from '../../lib/core/model/codec.js';
import { forceReconnect } from '../../lib/core/redis/connection.js';
import {
  InvalidTaskError,
  PayloadTooLargeError,
  RedisTaskClient,
  RedisTaskRecordBuilder,
  RedisUnavailableError,
  type RedisTaskClientOptions,
  type RedisTaskReceipt,
} from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import type { TaskRedis } from '../../lib/core/redis/scripts.js';
import { deleteKeys, openRedis, redisUrl, testPrefix } from '../support/redis.js';

const redis = openRedis();
const opened: { close(): Promise<unknown> }[] = [];
let prefix = '';
let keys: PrefixKeys;

function fresh(name: string): void {
  prefix = testPrefix(name);
  keys = new PrefixKeys(prefix);
}

async function client(options: RedisTaskClientOptions = {}): Promise<RedisTaskClient> {
  const made = new RedisTaskClient({ connection: redisUrl(), prefix, ...options });
  opened.push(made);
  await made.connect();
  return made;
}

/** Records every enqueue script call made on a connection: the tasks each carried (plain tasks are 2 fields). */
function recordCalls(connection: TaskRedis): { tasks: string[][] } {
  const calls: { tasks: string[][] } = { tasks: [] };
  const original = connection.enqueueTasks.bind(connection);
  connection.enqueueTasks = (root: string, ...args: (string | number)[]) => {
    const entries: string[] = [];
    // The call record comes first (one field starting with '{': see enqueueTasks-1.lua).
    for (let a = String(args[0]).startsWith('{') ? 1 : 0; a < args.length;) {
      if (args[a] === '') {
        entries.push(String(args[a + 2]));
        a += 8;
      } else {
        entries.push(String(args[a + 1]));
        a += 2;
      }
    }
    calls.tasks.push(
      entries.map((raw) => (decodeEntry(raw) as { ok: true; entry: { envelope: { id: string } } }).entry.envelope.id),
    );
    return original(root, ...args);
  };
  return calls;
}

async function storedIds(pattern: string, clientId = 'default'): Promise<string[]> {
  const raw = await redis.lrange(keys.queue(pattern).pending(clientId), 0, -1);
  return raw.map(
    (entry) => (decodeEntry(entry) as { ok: true; entry: { envelope: { id: string } } }).entry.envelope.id,
  );
}

afterEach(async () => {
  await Promise.all(opened.splice(0).map((made) => made.close()));
  await deleteKeys(redis, prefix);
});

afterAll(async () => {
  await redis.quit();
});

describe('coalesced enqueue', () => {
  it('sends the emits of one event-loop turn as one script call, each with its own receipt, in order', async () => {
    fresh('coalesce-turn');
    const producer = await client();
    await firstValueFrom(producer.emit('work', { warm: true })); // the queue's first use checks its layout
    const calls = recordCalls(producer.unwrap<TaskRedis>());
    const receipts = await Promise.all(
      Array.from({ length: 300 }, (_, n) => firstValueFrom(producer.emit<RedisTaskReceipt>('work', { n }))),
    );
    expect(calls.tasks).toHaveLength(1);
    expect(calls.tasks[0]).toEqual(receipts.map((receipt) => receipt.id));
    expect(new Set(receipts.map((receipt) => receipt.id)).size).toBe(300);
    // FIFO holds across the coalesced call: the list is in emit order.
    expect((await storedIds('work')).slice(1)).toEqual(receipts.map((receipt) => receipt.id));
  });

  it('answers a large call about 32 callers at a time, sending what they emit next before answering the rest', async () => {
    fresh('coalesce-slices');
    const producer = await client();
    await firstValueFrom(producer.emit('work', { warm: true }));
    const connection = producer.unwrap<TaskRedis>();
    const calls = recordCalls(connection);
    // How many first-round emits had been answered when each call was sent.
    let answered = 0;
    const answeredAtCall: number[] = [];
    const send = connection.enqueueTasks;
    connection.enqueueTasks = (root: string, ...args: (string | number)[]) => {
      answeredAtCall.push(answered);
      return send(root, ...args);
    };
    const rounds = await Promise.all(
      Array.from({ length: 64 }, async (_, caller) => {
        const first = await firstValueFrom(producer.emit<RedisTaskReceipt>('work', { caller, round: 0 }));
        answered++;
        const second = await firstValueFrom(producer.emit<RedisTaskReceipt>('work', { caller, round: 1 }));
        return [first.id, second.id];
      }),
    );
    // The 64 emits made at once are one call; the callers answered first have their next call sent
    // while the other 32 still wait for their answers.
    expect(calls.tasks.map((tasks) => tasks.length)).toEqual([64, 32, 32]);
    expect(answeredAtCall).toEqual([0, 32, 64]);
    expect(calls.tasks.flat()).toEqual([...rounds.map(([first]) => first), ...rounds.map(([, second]) => second)]);
    expect((await storedIds('work')).slice(1)).toEqual(calls.tasks.flat()); // after the warm-up task, in call order
  });

  it('answers every written emit of a call answered in slices when the client closes between them', async () => {
    fresh('coalesce-slices-close');
    const producer = await client();
    await firstValueFrom(producer.emit('work', { warm: true }));
    let closing: Promise<void> | undefined;
    const results = await Promise.allSettled(
      Array.from({ length: 64 }, async (_, n) => {
        const receipt = await firstValueFrom(producer.emit<RedisTaskReceipt>('work', { n }));
        closing ??= producer.close(); // the first caller answered closes the client
        return receipt.id;
      }),
    );
    await closing;
    expect(results.map((result) => result.status)).toEqual(Array.from({ length: 64 }, () => 'fulfilled'));
    const ids = results.map((result) => (result as PromiseFulfilledResult<string>).value);
    expect((await storedIds('work')).slice(1)).toEqual(ids);
  });

  it('fails only the invalid emit of a turn; its neighbours are written', async () => {
    fresh('coalesce-invalid');
    const producer = await client({ maxPayloadBytes: 100 });
    await firstValueFrom(producer.emit('work', { warm: true }));
    const calls = recordCalls(producer.unwrap<TaskRedis>());
    const circular: Record<string, unknown> = {};
    circular.self = circular;
    const badPriority = new RedisTaskRecordBuilder({ n: 3 }).build();
    (badPriority.options as { priority?: number }).priority = -1;
    const results = await Promise.allSettled([
      firstValueFrom(producer.emit<RedisTaskReceipt>('work', { n: 1 })),
      firstValueFrom(producer.emit<RedisTaskReceipt>('work', circular)),
      firstValueFrom(producer.emit<RedisTaskReceipt>('work', { n: 2 })),
      firstValueFrom(producer.emit<RedisTaskReceipt>('work', { blob: 'x'.repeat(200) })),
      firstValueFrom(producer.emit<RedisTaskReceipt>('work', badPriority)),
      firstValueFrom(producer.emit<RedisTaskReceipt>('work', { n: 4 })),
    ]);
    expect(results.map((result) => result.status)).toEqual([
      'fulfilled',
      'rejected',
      'fulfilled',
      'rejected',
      'rejected',
      'fulfilled',
    ]);
    expect((results[1] as PromiseRejectedResult).reason).toBeInstanceOf(InvalidTaskError);
    expect((results[3] as PromiseRejectedResult).reason).toBeInstanceOf(PayloadTooLargeError);
    expect((results[4] as PromiseRejectedResult).reason).toBeInstanceOf(InvalidTaskError);
    const written = [results[0], results[2], results[5]].map(
      (result) => (result as PromiseFulfilledResult<RedisTaskReceipt>).value.id,
    );
    expect(calls.tasks).toEqual([written]);
    expect((await storedIds('work')).slice(1)).toEqual(written);
  });

  it('coalesces the calls of clients that share one connection, each task under its own client id', async () => {
    fresh('coalesce-shared');
    const shared = new Redis(redisUrl());
    try {
      const first = await client({ connection: shared, clientId: 'tenant-a' });
      const second = await client({ connection: shared, clientId: 'tenant-b' });
      await firstValueFrom(first.emit('work', { warm: true }));
      await firstValueFrom(second.emit('work', { warm: true }));
      const calls = recordCalls(first.unwrap<TaskRedis>());
      const [a, b] = await Promise.all([
        Promise.all(Array.from({ length: 20 }, (_, n) => firstValueFrom(first.emit<RedisTaskReceipt>('work', { n })))),
        Promise.all(Array.from({ length: 20 }, (_, n) => firstValueFrom(second.emit<RedisTaskReceipt>('work', { n })))),
      ]);
      expect(calls.tasks).toHaveLength(1);
      expect(calls.tasks[0]).toHaveLength(40);
      expect((await storedIds('work', 'tenant-a')).slice(1)).toEqual(a.map((receipt) => receipt.id));
      expect((await storedIds('work', 'tenant-b')).slice(1)).toEqual(b.map((receipt) => receipt.id));
    } finally {
      await Promise.all(opened.splice(0).map((made) => made.close()));
      await shared.quit();
    }
  });

  it('bounds a call by batchChunkSize and never splits a caller: a batch stays all in one call', async () => {
    fresh('coalesce-chunks');
    const producer = await client({ batchChunkSize: 10 });
    await firstValueFrom(producer.emit('work', { warm: true }));
    const calls = recordCalls(producer.unwrap<TaskRedis>());
    const singles = Array.from({ length: 8 }, (_, n) => firstValueFrom(producer.emit<RedisTaskReceipt>('work', { n })));
    const batch = producer.emitBatch(
      'work',
      Array.from({ length: 5 }, (_, n) => ({ batch: n })),
    );
    const more = Array.from({ length: 2 }, (_, n) =>
      firstValueFrom(producer.emit<RedisTaskReceipt>('work', { more: n })),
    );
    const [first, batched, second] = await Promise.all([Promise.all(singles), batch, Promise.all(more)]);
    expect(calls.tasks).toEqual([first.map((r) => r.id), [...batched, ...second].map((r) => r.id)]);
    expect((await storedIds('work')).slice(1)).toEqual([...first, ...batched, ...second].map((r) => r.id));
  });

  it('refuses the second of two emits with one deduplication key in the same call', async () => {
    fresh('coalesce-dedup');
    const producer = await client();
    await firstValueFrom(producer.emit('work', { warm: true }));
    const calls = recordCalls(producer.unwrap<TaskRedis>());
    const record = (n: number) => new RedisTaskRecordBuilder({ n }).setDeduplicationKey('order-7').build();
    const [first, second] = await Promise.all([
      firstValueFrom(producer.emit<RedisTaskReceipt>('work', record(1))),
      firstValueFrom(producer.emit<RedisTaskReceipt>('work', record(2))),
    ]);
    expect(calls.tasks).toHaveLength(1);
    expect(first.duplicate).toBe(false);
    expect(second).toEqual({ id: first.id, duplicate: true });
    expect(await storedIds('work')).toHaveLength(2); // the warm-up task and the first
  });

  it('loses nothing when the connection drops right after a coalesced call was sent', async () => {
    fresh('coalesce-drop');
    const producer = await client({ enqueueTimeoutMs: 3_000 });
    await firstValueFrom(producer.emit('work', { warm: true }));
    const connection = producer.unwrap<TaskRedis>();
    const emits = Array.from({ length: 200 }, (_, n) => firstValueFrom(producer.emit<RedisTaskReceipt>('work', { n })));
    // Runs after the coalescer's flush (scheduled by the first emit): the call is written, its answer lost.
    process.nextTick(() => forceReconnect(connection));
    const results = await Promise.allSettled(emits);
    const stored = await storedIds('work');
    for (const result of results) {
      if (result.status === 'fulfilled') {
        expect(stored).toContain(result.value.id);
      } else {
        expect(result.reason).toBeInstanceOf(RedisUnavailableError);
        expect((result.reason as RedisUnavailableError).written).not.toBe(true);
      }
    }
    // A call resent after the reconnection may repeat the batch (reported as maybe written); none is lost.
    const fulfilled = results.filter((result) => result.status === 'fulfilled').length;
    expect(stored.length - 1).toBeGreaterThanOrEqual(fulfilled);
  });

  it('makes one call per shard of a sharded queue, each task in its client shard, receipts in order', async () => {
    fresh('coalesce-shards');
    const producer = await client({ shards: 4 });
    await firstValueFrom(producer.emit('work', { warm: true }));
    const calls = recordCalls(producer.unwrap<TaskRedis>());
    const clients = Array.from({ length: 40 }, (_, n) => `c${n}`);
    const receipts = await Promise.all(
      clients.map((clientId, n) =>
        firstValueFrom(
          producer.emit<RedisTaskReceipt>('work', new RedisTaskRecordBuilder({ n }).setClientId(clientId).build()),
        ),
      ),
    );
    const layout = keys.layout('work', 4);
    const shardsUsed = new Set(clients.map((clientId) => layout.shardOf(clientId).root));
    expect(shardsUsed.size).toBe(4);
    expect(calls.tasks).toHaveLength(4);
    for (const [n, clientId] of clients.entries()) {
      const raw = await redis.lrange(layout.shardOf(clientId).pending(clientId), 0, -1);
      expect(
        raw.map((entry) => (decodeEntry(entry) as { ok: true; entry: { envelope: { id: string } } }).entry.envelope.id),
      ).toEqual([receipts[n].id]);
    }
  });
});
