import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { firstValueFrom } from 'rxjs';
import { RedisTaskRecordBuilder } from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { decodeEntry } from '../../lib/core/model/codec.js';
import { Redis } from 'ioredis';
import { TaskStore } from '../../lib/core/redis/store.js';
import { enqueueAnswer } from '../../lib/core/redis/gateway.js';
import { prepareTask } from '../../lib/core/producer/task-items.js';
import { startProducer } from '../support/nest.js';
import { deleteKeys, keysUnder, openRedis, redisUrl, testPrefix, waitFor } from '../support/redis.js';
import { startProxy, type TcpProxy } from '../support/tcp-proxy.js';

// ioredis resends a command whose reply a reconnection lost (autoResendUnfulfilledCommands). An enqueue
// call that Redis ran before the connection dropped must not write its tasks twice when resent, and its
// callers get their normal receipts (a deduplicated task is "written", not a duplicate of itself).

const redis = openRedis();
const LIMITS = { maxPayloadBytes: 1_000_000, deduplicationTtlMs: 60_000 };
const closing: { close(): Promise<unknown> }[] = [];
let openProxy: TcpProxy | undefined;
let prefix = '';
/** In every enqueue call the client numbers on its connection: its session follows the record's TTL (call-sequence.ts). */
const NUMBERED = '.~';

afterEach(async () => {
  await Promise.all(closing.splice(0).map((item) => item.close()));
  await openProxy?.close();
  openProxy = undefined;
  await deleteKeys(redis, prefix);
});

afterAll(async () => {
  await redis.quit();
});

/** Task ids in the pending lists of the given clients, with how often each is there. */
async function idsIn(pattern: string, clients: string[]): Promise<Map<string, number>> {
  const queue = new PrefixKeys(prefix).queue(pattern);
  const seen = new Map<string, number>();
  for (const client of clients) {
    for (const raw of await redis.lrange(queue.pending(client), 0, -1)) {
      const decoded = decodeEntry(raw);
      const id = decoded.ok ? decoded.entry.envelope.id : '?';
      seen.set(id, (seen.get(id) ?? 0) + 1);
    }
  }
  return seen;
}

/**
 * A producer of its own test prefix whose Redis connection runs through a new TCP proxy (the test cuts replies
 * there), both closed after the test.
 */
async function proxiedProducer(name: string, enqueueTimeoutMs = 10_000) {
  prefix = testPrefix(name);
  const through = await startProxy(Number(new URL(redisUrl()).port || 6379));
  openProxy = through;
  const { client, module } = await startProducer(prefix, { connection: through.url, enqueueTimeoutMs });
  closing.push(module);
  return { client, proxy: through };
}

describe('an enqueue call resent after its reply was lost', () => {
  it('writes each task once and answers each caller normally, over 20 trials of 32 coalesced emits and a 200-task batch', async () => {
    const { client, proxy } = await proxiedProducer('resend');
    const ids: string[] = [];
    let lost = 0;
    for (let trial = 0; trial < 20; trial++) {
      const cut = proxy.loseReplyTo(NUMBERED);
      const emits = Array.from({ length: 32 }, (_, i) =>
        firstValueFrom(client.emit('resend.task', new RedisTaskRecordBuilder({ n: i }).setClientId('c1').build())),
      );
      const batch = client.emitBatch(
        'resend.task',
        Array.from({ length: 200 }, (_, i) => new RedisTaskRecordBuilder({ n: i }).setClientId('c2').build()),
      );
      const receipts = [...(await Promise.all(emits)), ...(await batch)];
      await cut;
      lost++;
      expect(receipts.every((receipt) => !receipt.duplicate)).toBe(true);
      ids.push(...receipts.map((receipt) => receipt.id));
    }
    expect(lost).toBe(20);
    const seen = await idsIn('resend.task', ['c1', 'c2']);
    expect(seen.size).toBe(ids.length);
    expect([...seen.values()].filter((count) => count > 1)).toEqual([]);
    expect(new Set(ids).size).toBe(ids.length);
    const queue = new PrefixKeys(prefix).queue('resend.task');
    expect(await redis.get(queue.pendingCount)).toBe(String(ids.length));
  });

  it('writes each of 40 awaited emits once when every fourth reply is lost, and leaves one mark per connection, no key per call', async () => {
    const { client, proxy } = await proxiedProducer('resend-awaited');
    const ids: string[] = [];
    for (let i = 0; i < 40; i++) {
      const cut = i % 4 === 0 ? proxy.loseReplyTo(NUMBERED) : undefined;
      ids.push((await firstValueFrom(client.emit('resend.awaited', { i }))).id);
      await cut;
    }
    const seen = await idsIn('resend.awaited', ['default']);
    expect([...seen.keys()].sort()).toEqual([...ids].sort());
    expect([...seen.values()].filter((count) => count > 1)).toEqual([]);
    const queue = new PrefixKeys(prefix).queue('resend.awaited');
    const records = (await keysUnder(redis, prefix)).filter((key) => key.startsWith(queue.call('')));
    expect(records).toHaveLength(1);
    expect(Number(await redis.pttl(records[0]))).toBeGreaterThan(0);
  });

  it('answers a resent call of deduplicated emits with their own ids as written, and writes none twice (20 trials)', async () => {
    const { client, proxy } = await proxiedProducer('resend-dedup');
    let total = 0;
    for (let trial = 0; trial < 20; trial++) {
      const cut = proxy.loseReplyTo(NUMBERED);
      const receipts = await Promise.all(
        Array.from({ length: 16 }, (_, i) =>
          firstValueFrom(
            client.emit(
              'resend.dedup',
              new RedisTaskRecordBuilder({ n: i }).setDeduplicationKey(`k${trial}-${i}`).build(),
            ),
          ),
        ),
      );
      await cut;
      total += receipts.length;
      expect(receipts.filter((receipt) => receipt.duplicate)).toEqual([]);
    }
    const seen = await idsIn('resend.dedup', ['default']);
    expect(seen.size).toBe(total);
    expect([...seen.values()].every((count) => count === 1)).toBe(true);
  });

  it("counts a batch's opening and completion once when the count's reply was lost and it was resent", async () => {
    const { client, proxy } = await proxiedProducer('resend-batch-count');
    const counters = new PrefixKeys(prefix).batchCounters;
    // The opening's count: the reply to the first command naming the counters is lost.
    let cut = proxy.loseReplyTo(counters);
    await client.batch({ id: 'b1', onComplete: { pattern: 'resend.done' } }).add('resend.task', [{ n: 1 }]);
    await cut;
    expect(await redis.hget(counters, 'opened')).toBe('1');
    // The completion's count: an empty batch sealed completes at once, in the same call.
    const empty = client.batch({ id: 'b2', onComplete: { pattern: 'resend.done' } });
    await empty.add('resend.task', []);
    cut = proxy.loseReplyTo('completed');
    await empty.seal();
    await cut;
    expect(await redis.hgetall(counters)).toEqual({ opened: '2', completed: '1' });
  });

  it('lets 64 emits wait through an outage on one set of listeners (no MaxListenersExceededWarning)', async () => {
    const { client, proxy } = await proxiedProducer('resend-listeners', 600);
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(warning.name);
    process.on('warning', onWarning);
    try {
      proxy.dropAfter(50);
      const outcomes = await Promise.allSettled(
        Array.from({ length: 64 }, (_, i) => firstValueFrom(client.emit('resend.outage', { i }))),
      );
      expect(outcomes.every((outcome) => outcome.status === 'rejected')).toBe(true);
      await new Promise((resolve) => setImmediate(resolve));
      expect(warnings.filter((name) => name === 'MaxListenersExceededWarning')).toEqual([]);
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('writes nothing of an enqueue call first written after its deadline (it waited in the offline queue through an outage); one within its deadline is written', async () => {
    prefix = testPrefix('resend-late-first');
    const proxy = await startProxy(Number(new URL(redisUrl()).port || 6379));
    openProxy = proxy;
    // A reaper's connection: it keeps commands while Redis is away, and writes them once Redis is back.
    const connection = new Redis(proxy.url, { maxRetriesPerRequest: null, retryStrategy: () => 20 });
    closing.push({ close: async () => connection.disconnect() });
    const store = TaskStore.onConnection(connection, prefix);
    const queue = store.keys.queue('resend.late');
    await connection.ping();
    proxy.dropAfter(20);
    await waitFor(() => connection.status !== 'ready', 'the connection to notice');
    const call = (clientId: string, deadline: number) =>
      store.gateway.enqueue(queue, {
        deadline,
        timeoutMs: 10_000,
        batches: [{ tasks: [prepareTask({ clientId, payload: { clientId } }, Date.now(), undefined, LIMITS)] }],
      });
    const lateDeadline = Date.now() + 200;
    const late = call('late', lateDeadline);
    const timely = call('timely', Date.now() + 60_000);
    await waitFor(() => Date.now() > lateDeadline, 'the deadline to pass while Redis is away');
    expect(connection.status).not.toBe('ready');
    proxy.restore();
    // Mode '3': no answer on record, nothing written (enqueueAnswer throws it as such).
    const lateAnswer = await late;
    expect(lateAnswer).toBe(-1);
    expect(() => enqueueAnswer(lateAnswer)).toThrow(/after its deadline/);
    expect(enqueueAnswer(await timely)).toEqual([0]);
    expect(await redis.llen(queue.pending('late'))).toBe(0);
    expect(await redis.llen(queue.pending('timely'))).toBe(1);
  });
});
