import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { Ctx, EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { Cluster } from 'ioredis';
import { firstValueFrom } from 'rxjs';
import { checkClusterLayout } from '../../lib/core/redis/guardrails.js';
import { hashSlot } from '../../lib/core/redis/hash-slot.js';
import { defineScripts } from '../../lib/core/redis/scripts.js';
import {
  PrefixInUseError,
  RedisTaskAdmin,
  RedisTaskClient,
  RedisTaskContext,
  RedisTaskRecordBuilder,
  ShardCountMismatchError,
  type BatchSummary,
  type RedisTaskClientOptions,
  type RedisTaskTransportOptions,
} from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { startProducer, startWorker } from '../support/nest.js';
import { gatewayOf } from '../../lib/core/redis/gateway.js';
import { claimAs, testPrefix, waitFor, type TestRedis } from '../support/redis.js';
import { startCluster } from '../support/topology.js';

let cluster: Awaited<ReturnType<typeof startCluster>>;
let redis: Cluster;
const started: { close(): Promise<unknown> }[] = [];
const handled = new Map<string, number>();
const clientsSeen = new Set<string>();
let failures = 0;
const order = new Map<string, number[]>();
const running = new Map<string, number>();
let maxRunning = 0;
const summaries: BatchSummary[] = [];

@Controller()
class Handlers {
  @EventPattern<string>('cluster.work')
  work(@Payload() payload: { key: string }, @Ctx() ctx: RedisTaskContext): void {
    handled.set(payload.key, (handled.get(payload.key) ?? 0) + 1);
    clientsSeen.add(ctx.getClientId());
  }

  @EventPattern<string>('cluster.ordered', { clientConcurrency: 1 })
  async ordered(@Payload() payload: { n: number }, @Ctx() ctx: RedisTaskContext): Promise<void> {
    const client = ctx.getClientId();
    const seen = order.get(client) ?? [];
    seen.push(payload.n);
    order.set(client, seen);
    running.set(client, (running.get(client) ?? 0) + 1);
    maxRunning = Math.max(maxRunning, running.get(client)!);
    await new Promise((resolve) => setTimeout(resolve, 1));
    running.set(client, running.get(client)! - 1);
  }

  /** A task of a batch (fails every attempt when its payload says so). */
  @EventPattern<string>('cluster.batch', { maxAttempts: 2, backoff: { type: 'fixed', delayMs: 20 } })
  batchTask(@Payload() payload: { key: string; fail?: boolean }): void {
    handled.set(payload.key, (handled.get(payload.key) ?? 0) + 1);
    if (payload.fail) throw new Error('this task fails');
  }

  @EventPattern<string>('cluster.batchDone')
  batchDone(@Payload() summary: BatchSummary): void {
    summaries.push(summary);
  }

  @MessagePattern<string>('cluster.add')
  add(@Payload() payload: { a: number; b: number }): number {
    return payload.a + payload.b;
  }

  @EventPattern<string>('cluster.tick')
  tick(@Ctx() ctx: RedisTaskContext): void {
    handled.set(ctx.getTaskId(), (handled.get(ctx.getTaskId()) ?? 0) + 1);
  }

  @EventPattern<string>('cluster.fail', { maxAttempts: 2, backoff: { type: 'fixed', delayMs: 50 } })
  fail(): void {
    failures++;
    throw new Error('always fails');
  }
}

function connection(): { nodes: { host: string; port: number }[] } {
  return { nodes: cluster.nodes };
}

async function worker(prefix: string, options: RedisTaskTransportOptions = {}) {
  const app = await startWorker(prefix, [Handlers], { connection: connection(), ...options });
  started.push(app.app);
  return app;
}

async function producer(prefix: string, options: RedisTaskClientOptions = {}): Promise<RedisTaskClient> {
  const { client, module } = await startProducer(prefix, { connection: connection(), ...options });
  started.push(module);
  return client;
}

beforeAll(async () => {
  cluster = await startCluster(3);
  redis = new Cluster(cluster.nodes);
  await redis.ping();
}, 60_000);

afterEach(async () => {
  await Promise.all(started.splice(0).map((app) => app.close()));
  handled.clear();
  clientsSeen.clear();
  failures = 0;
});

afterAll(async () => {
  redis?.disconnect();
  await cluster?.stop();
});

/** How many keys each primary holds (the servers are this suite's own). */
async function keysPerPrimary(): Promise<number[]> {
  return Promise.all(redis.nodes('master').map((node) => node.dbsize()));
}

describe('Redis Cluster (3 primaries)', () => {
  it('maps every key of a queue shard to the slot its hash tag names, as the cluster computes it', async () => {
    const keys = new PrefixKeys(testPrefix('slots'));
    for (const layout of [keys.layout('a.b', 1), keys.layout('we{ird}%', 3)]) {
      for (const shard of layout.shards) {
        for (const key of [
          shard.ring,
          shard.pending('c1'),
          shard.processing('w1'),
          shard.delayed,
          shard.deadLetters,
          shard.result('x'),
        ]) {
          expect(Number(await redis.call('CLUSTER', 'KEYSLOT', key))).toBe(shard.slot);
        }
        expect(hashSlot(shard.ring)).toBe(shard.slot);
      }
    }
    // The shard count record lives in the unsharded tag.
    expect(Number(await redis.call('CLUSTER', 'KEYSLOT', keys.shardCount('a.b')))).toBe(keys.queue('a.b').slot);
  });

  it('runs events, send() replies, retries into dead letters and admin requeue on a cluster connection', async () => {
    const prefix = testPrefix('core');
    await worker(prefix, { concurrency: 4 });
    const client = await producer(prefix);
    await firstValueFrom(client.emit('cluster.work', { key: 'one' }));
    await waitFor(() => handled.get('one') === 1, 'the event to be handled');
    expect(await firstValueFrom(client.send('cluster.add', { a: 2, b: 3 }))).toBe(5);
    await firstValueFrom(client.emit('cluster.fail', {}));
    const admin = new RedisTaskAdmin(client);
    await waitFor(async () => (await admin.countDeadLetters('cluster.fail')) === 1, 'the failing task in dead letters');
    expect(failures).toBe(2);
    const [record] = await admin.listDeadLetters('cluster.fail');
    expect(record).toMatchObject({ reason: 'failed', attempts: 2 });
    expect(await admin.requeueDeadLetters('cluster.fail', 'all')).toEqual({ requeued: 1, skipped: 0 });
    await waitFor(() => failures === 4, 'the requeued task to run twice more');
  });

  it('spreads a queue with shards: 3 over the 3 primaries and handles 20,000 tasks from 30 clients exactly once', async () => {
    const prefix = testPrefix('shards');
    const client = await producer(prefix, { shards: 3 });
    const before = await keysPerPrimary();
    const total = 20_000;
    for (let start = 0; start < total; start += 2_000) {
      await client.emitBatch(
        'cluster.work',
        Array.from({ length: 2_000 }, (_, i) => {
          const n = start + i;
          return new RedisTaskRecordBuilder({ key: `k${n}` }).setClientId(`client-${n % 30}`).build();
        }),
      );
    }
    // Before any worker runs, every primary holds pending lists of the queue.
    const after = await keysPerPrimary();
    expect(after.every((count, i) => count - before[i] >= 5)).toBe(true);
    const layout = new PrefixKeys(prefix).layout('cluster.work', 3);
    expect(new Set(layout.shards.map((shard) => redis.slots[shard.slot]?.[0])).size).toBe(3);

    await worker(prefix, { shards: 3, concurrency: 16, workerId: 'shard-a' });
    await worker(prefix, { shards: 3, concurrency: 16, workerId: 'shard-b' });
    await waitFor(() => handled.size === total, `${total} distinct tasks handled`, {
      timeoutMs: 90_000,
      intervalMs: 50,
    });
    for (const shard of layout.shards) {
      await waitFor(
        async () =>
          (await redis.hlen(shard.processing('shard-a'))) + (await redis.hlen(shard.processing('shard-b'))) === 0,
        'every claim acknowledged',
      );
      expect(await redis.exists(shard.ring)).toBe(0);
    }
    expect([...handled.values()].every((count) => count === 1)).toBe(true);
    expect(clientsSeen.size).toBe(30);
  }, 120_000);

  it('deletes one prefix on every primary (deletePrefix), refused while its worker lives', async () => {
    const prefix = testPrefix('delete-prefix');
    const client = await producer(prefix, { shards: 3 });
    const app = await worker(prefix, { shards: 3, workerId: 'doomed' });
    await client.emitBatch(
      'cluster.work',
      Array.from({ length: 300 }, (_, i) =>
        new RedisTaskRecordBuilder({ key: `d${i}` })
          .setClientId(`c${i % 30}`)
          .setDelay(60_000)
          .build(),
      ),
    );
    const admin = new RedisTaskAdmin(client);
    await expect(admin.deletePrefix()).rejects.toBeInstanceOf(PrefixInUseError);
    const ours = async () =>
      (await Promise.all(redis.nodes('master').map((node) => node.keys(`${prefix}:*`)))).map((keys) => keys.length);
    expect((await ours()).every((count) => count > 0)).toBe(true); // every primary holds keys of it
    await app.app.close();
    const { deleted } = await admin.deletePrefix();
    expect(deleted).toBeGreaterThan(9);
    expect(await ours()).toEqual([0, 0, 0]);
  });

  it('wakes a blocked worker within moments of an enqueue on any shard', async () => {
    const prefix = testPrefix('wake');
    await worker(prefix, { shards: 3, blockTimeoutMs: 60_000 });
    const client = await producer(prefix, { shards: 3 });
    const layout = new PrefixKeys(prefix).layout('cluster.work', 3);
    // One client id per shard, so each enqueue lands on another shard (and primary).
    const perShard = layout.shards.map((shard) => {
      for (let n = 0; ; n++) if (layout.shardOf(`c${n}`) === shard) return `c${n}`;
    });
    for (const clientId of perShard) {
      const key = `wake-${clientId}`;
      const sent = Date.now();
      await firstValueFrom(
        client.emit('cluster.work', new RedisTaskRecordBuilder({ key }).setClientId(clientId).build()),
      );
      await waitFor(() => handled.has(key), `the task on the shard of ${clientId}`, {
        timeoutMs: 5_000,
        intervalMs: 2,
      });
      // Far below the 60 s block timeout: the BLMOVE of that shard's loop woke it.
      expect(Date.now() - sent).toBeLessThan(2_000);
    }
  });

  it("has a reaper on the cluster recover a dead worker's claimed tasks from every shard", async () => {
    const prefix = testPrefix('reap');
    const client = await producer(prefix, { shards: 3 });
    const layout = new PrefixKeys(prefix).layout('cluster.work', 3);
    const ids = layout.shards.map((shard) =>
      Array.from({ length: 100 }, (_, n) => `c${n}`).find((id) => layout.shardOf(id) === shard)!,
    );
    for (const clientId of ids) {
      await firstValueFrom(
        client.emit(
          'cluster.work',
          new RedisTaskRecordBuilder({ key: `ghost-${clientId}` }).setClientId(clientId).build(),
        ),
      );
    }
    // A worker that claims one task on each shard, then dies: its lease runs out.
    const scripts = defineScripts(redis) as unknown as TestRedis;
    for (const shard of layout.shards) {
      await gatewayOf(scripts).heartbeat(shard, 'ghost', 60_000);
      expect(await claimAs(scripts, shard, 'ghost', 1)).toHaveLength(2);
      await scripts.zadd(shard.workers, '1', 'ghost');
    }
    const { transport } = await worker(prefix, { shards: 3, reaperIntervalMs: false });
    let recovered = 0;
    await waitFor(
      async () => (recovered += (await transport.sweep()).recovered) >= 3,
      "the ghost's lease to expire and its tasks to be recovered",
    );
    expect(recovered).toBe(3);
    await waitFor(() => ids.every((clientId) => handled.get(`ghost-${clientId}`) === 1), 'the recovered tasks to run');
  });

  it("fires each of 50 batches' callback exactly once, with the right counts, when their tasks settle on 3 primaries and a dead worker's tasks are recovered", async () => {
    const prefix = testPrefix('batches');
    const client = await producer(prefix, { shards: 3 });
    const expected = new Map<string, { total: number; failed: number }>();
    for (let b = 0; b < 50; b++) {
      const total = 1 + ((b * 7) % 50);
      const items = Array.from({ length: total }, (_, i) => ({
        key: `b${b}.${i}`,
        ...(i % 9 === 4 ? { fail: true } : {}),
      }));
      const batch = client.batch({ id: `b${b}`, onComplete: { pattern: 'cluster.batchDone' } });
      await batch.add(
        'cluster.batch',
        items.map((item, i) => new RedisTaskRecordBuilder(item).setClientId(`c${i % 5}`).build()),
      );
      await batch.seal();
      expected.set(`b${b}`, { total, failed: items.filter((item) => item.fail).length });
    }
    // A worker claims a few tasks on each shard and dies: their batches wait until a reaper recovers them.
    const layout = new PrefixKeys(prefix).layout('cluster.batch', 3);
    const scripts = defineScripts(redis) as unknown as TestRedis;
    for (const shard of layout.shards) {
      await gatewayOf(scripts).heartbeat(shard, 'ghost', 60_000);
      await claimAs(scripts, shard, 'ghost', 3);
      await scripts.zadd(shard.workers, '1', 'ghost');
    }
    await worker(prefix, { shards: 3, reaperIntervalMs: 50 });
    await worker(prefix, { shards: 3, reaperIntervalMs: 50 });
    await waitFor(() => summaries.length >= 50, 'every callback', { timeoutMs: 60_000 });
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(summaries).toHaveLength(50);
    for (const summary of summaries) {
      const { total, failed } = expected.get(summary.batchId)!;
      expect({
        id: summary.batchId,
        total: summary.total,
        failed: summary.failed,
        succeeded: summary.succeeded,
      }).toEqual({
        id: summary.batchId,
        total,
        failed,
        succeeded: total - failed,
      });
    }
    expect(new Set(summaries.map((summary) => summary.batchId)).size).toBe(50);
    summaries.length = 0;
  });

  it('coalesces 100 emits of one key from 5 clients into one run of the last payload in a queue sharded over 3 primaries', async () => {
    const prefix = testPrefix('latest');
    const client = await producer(prefix, { shards: 3 });
    const receipts = await client.emitBatch(
      'cluster.work',
      Array.from({ length: 100 }, (_, n) =>
        new RedisTaskRecordBuilder({ key: `avatar-${n}` })
          .setClientId(`c${n % 5}`)
          .setCoalesceKey('avatar:7')
          .build(),
      ),
    );
    expect(receipts.filter((receipt) => receipt.replaced !== undefined)).toHaveLength(99);
    await worker(prefix, { shards: 3 });
    await waitFor(() => handled.get('avatar-99') === 1, 'the last payload to run');
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect([...handled.keys()]).toEqual(['avatar-99']);
  });

  it('keeps per-client FIFO order and the per-client cap of 1 in a sharded queue, across two workers', async () => {
    const prefix = testPrefix('fifo');
    const client = await producer(prefix, { shards: 3 });
    const clients = ['a', 'b', 'c', 'd', 'e', 'f'];
    await client.emitBatch(
      'cluster.ordered',
      Array.from({ length: 300 }, (_, n) =>
        new RedisTaskRecordBuilder({ n }).setClientId(clients[n % clients.length]).build(),
      ),
    );
    await worker(prefix, { shards: 3, concurrency: 8 });
    await worker(prefix, { shards: 3, concurrency: 8 });
    await waitFor(() => [...order.values()].reduce((sum, seen) => sum + seen.length, 0) === 300, 'all 300 tasks');
    for (const [index, id] of clients.entries()) {
      const expected = Array.from({ length: 50 }, (_, k) => index + k * clients.length);
      expect(order.get(id)).toEqual(expected);
    }
    expect(maxRunning).toBe(1);
    expect(
      new Set(clients.map((id) => new PrefixKeys(prefix).layout('cluster.ordered', 3).shardOf(id).shard)).size,
    ).toBeGreaterThan(1);
  });

  it('keeps claiming from every shard while one shard holds a flood of 5,000 tasks', async () => {
    const prefix = testPrefix('starve');
    const client = await producer(prefix, { shards: 3 });
    const layout = new PrefixKeys(prefix).layout('cluster.work', 3);
    const flooder = 'flooder';
    const other = Array.from({ length: 100 }, (_, n) => `other-${n}`).find(
      (id) => layout.shardOf(id) !== layout.shardOf(flooder),
    )!;
    await client.emitBatch(
      'cluster.work',
      Array.from({ length: 5_000 }, (_, n) =>
        new RedisTaskRecordBuilder({ key: `flood-${n}` }).setClientId(flooder).build(),
      ),
    );
    await worker(prefix, { shards: 3, concurrency: 2, prefetch: 1 });
    await waitFor(() => handled.size >= 50, 'the flood to be under way');
    await firstValueFrom(
      client.emit('cluster.work', new RedisTaskRecordBuilder({ key: 'other' }).setClientId(other).build()),
    );
    await waitFor(() => handled.has('other'), "the other shard's task");
    // It ran long before the flood drained: the shard loops share the worker's slots.
    expect(handled.size).toBeLessThan(4_000);
  });

  it('fans tasks out to two consumer groups on a sharded queue, each copy handled once per group', async () => {
    const prefix = testPrefix('groups');
    const byGroup = new Map<string, Set<string>>();
    const groups = ['billing', 'email'];
    for (const group of groups) {
      const { transport } = await worker(prefix, { shards: 3, group, concurrency: 8 });
      transport.on('task', (event) => {
        if (event.outcome === 'completed') {
          const seen = byGroup.get(group) ?? new Set<string>();
          seen.add(event.id!);
          byGroup.set(group, seen);
        }
      });
    }
    const client = await producer(prefix, { shards: 3 });
    const receipts = await client.emitBatch(
      'cluster.work',
      Array.from({ length: 3_000 }, (_, n) =>
        new RedisTaskRecordBuilder({ key: `g${n}` }).setClientId(`client-${n % 9}`).build(),
      ),
    );
    await waitFor(() => groups.every((group) => byGroup.get(group)?.size === 3_000), 'both groups', {
      timeoutMs: 60_000,
      intervalMs: 50,
    });
    for (const group of groups) expect([...byGroup.get(group)!].sort()).toEqual(receipts.map((r) => r.id).sort());
    // Each key was handled twice in all: once per group.
    expect([...handled.values()].every((count) => count === 2)).toBe(true);
  });

  it('stores large payloads out of line on the shard of their task (3 primaries, two consumer groups), each read once per group and none left', async () => {
    const prefix = testPrefix('bodies');
    const payloads = new Map<string, number>();
    for (const group of ['billing', 'email']) {
      const { transport } = await worker(prefix, { shards: 3, group, concurrency: 8 });
      transport.on('task', (event) => {
        if (event.outcome === 'completed') payloads.set(`${group}/${event.id}`, 1);
      });
    }
    const client = await producer(prefix, { shards: 3, outOfLineBytes: 1_000 });
    const receipts = await client.emitBatch(
      'cluster.work',
      Array.from({ length: 90 }, (_, n) =>
        new RedisTaskRecordBuilder({ key: `b${n}`, pad: 'x'.repeat(5_000 + n) }).setClientId(`client-${n % 9}`).build(),
      ),
    );
    await waitFor(() => payloads.size === 180, 'each task run once per group', { timeoutMs: 30_000, intervalMs: 50 });
    // Each handler saw its own payload (its key) once per group.
    expect(receipts.length).toBe(90);
    expect(Array.from({ length: 90 }, (_, n) => handled.get(`b${n}`))).toEqual(Array.from({ length: 90 }, () => 2));
    const bodies = async () =>
      (await Promise.all(redis.nodes('master').map((node) => node.keys(`${prefix}:*:body:*`)))).flat();
    await waitFor(async () => (await bodies()).length === 0, 'every copy deleted once its group ran it');
  });

  it('fires a recurring schedule into a sharded queue once per tick with two workers (schedules and queue on different slots)', async () => {
    const prefix = testPrefix('cluster-sched');
    await worker(prefix, { shards: 3, workerId: 'sched-1' });
    await worker(prefix, { shards: 3, workerId: 'sched-2' });
    const client = await producer(prefix, { shards: 3 });
    const admin = new RedisTaskAdmin(client);
    await admin.upsertSchedule('cluster-pulse', {
      pattern: 'cluster.tick',
      everyMs: 200,
      clientId: 'tenant-7',
      overlap: 'allow',
    });
    const keys = new PrefixKeys(prefix);
    const shard = keys.layout('cluster.tick', 3).shardOf('tenant-7');
    expect(shard.slot).not.toBe(Number(await redis.call('CLUSTER', 'KEYSLOT', keys.schedules.due)));
    await waitFor(() => handled.size >= 12, 'twelve ticks run', { timeoutMs: 15_000 });
    await admin.pauseSchedule('cluster-pulse');
    const all = [...handled.keys()].map((id) => Date.parse(id.slice('cluster-pulse@'.length))).sort((a, b) => a - b);
    // The last second's tasks may still be on their way to a worker: the ticks before it are all in.
    const ticks = all.filter((tick) => tick < (all.at(-1) ?? 0) - 1_000);
    expect([...handled.values()].every((runs) => runs === 1)).toBe(true);
    const gaps = ticks.slice(1).map((tick, i) => tick - ticks[i]);
    expect(gaps.every((gap) => gap === 200)).toBe(true);
    expect(ticks.length).toBeGreaterThanOrEqual(6);
    expect((await admin.listSchedules())[0].state.fired).toBeGreaterThanOrEqual(ticks.length);
  });

  it('refuses to start when a shard key would map to another slot than its shard (CROSSSLOT guard)', async () => {
    const layout = new PrefixKeys(testPrefix('layout')).layout('cluster.work', 2);
    await expect(
      checkClusterLayout(redis, layout, { log: () => undefined, warn: () => undefined, error: () => undefined }),
    ).resolves.toBeUndefined();
    Object.defineProperty(layout.shards[1], 'ring', { value: 'not-tagged:ring' });
    await expect(
      checkClusterLayout(redis, layout, { log: () => undefined, warn: () => undefined, error: () => undefined }),
    ).rejects.toThrow(
      /key "not-tagged:ring" of queue "cluster.work" maps to cluster slot \d+, not \d+ like the rest of its shard/,
    );
  });

  it('refuses a producer or worker configured with another shard count than the queue has, naming both', async () => {
    const prefix = testPrefix('mismatch');
    const client = await producer(prefix, { shards: 3 });
    await firstValueFrom(client.emit('cluster.work', { key: 'first' }));
    const other = await producer(prefix, { shards: 2 });
    const refused = firstValueFrom(other.emit('cluster.work', { key: 'second' }));
    await expect(refused).rejects.toBeInstanceOf(ShardCountMismatchError);
    await expect(firstValueFrom(other.emit('cluster.work', { key: 'second' }))).rejects.toThrow(
      /spread over 3 shard\(s\), but this process is configured with shards: 2/,
    );
    await expect(startWorker(prefix, [Handlers], { connection: connection(), shards: 1 })).rejects.toBeInstanceOf(
      ShardCountMismatchError,
    );
    // The right count still works, and nothing was lost.
    await worker(prefix, { shards: 3 });
    await waitFor(() => handled.get('first') === 1, 'the first task');
    expect(handled.has('second')).toBe(false);
  });
});
