import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { Ctx, EventPattern, Payload } from '@nestjs/microservices';
import { firstValueFrom } from 'rxjs';
import {
  NonRetryableTaskError,
  RedisTaskAdmin,
  RedisTaskContext,
  RedisTaskRecordBuilder,
  type TaskOutcomeEvent,
} from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { startProducer, startWorker } from '../support/nest.js';
import { deleteKeys, gate, openRedis, testPrefix, waitFor } from '../support/redis.js';

const redis = openRedis();
const started: { close(): Promise<unknown> }[] = [];
let prefix = '';
const handled: string[] = [];
let release = gate();

@Controller()
class Handlers {
  @EventPattern<string>('admin.work')
  work(@Payload() payload: { key: string }): void {
    handled.push(payload.key);
  }

  @EventPattern<string>('admin.held')
  async held(@Payload() payload: { key: string }): Promise<void> {
    await release.promise;
    handled.push(payload.key);
  }

  @EventPattern<string>('admin.outcomes', { maxAttempts: 2, backoff: { type: 'fixed', delayMs: 10 } })
  outcomes(@Payload() payload: { kind: string }, @Ctx() ctx: RedisTaskContext): void {
    if (payload.kind === 'ok' || (payload.kind === 'flaky' && ctx.getAttempt() === 2)) return;
    if (payload.kind === 'poison') throw new NonRetryableTaskError('bad input');
    throw new Error('failed');
  }
}

async function setup() {
  prefix = testPrefix('admin');
  const { client, module } = await startProducer(prefix);
  started.push(module);
  return { client, admin: new RedisTaskAdmin(client) };
}

afterEach(async () => {
  release.open();
  await Promise.all(started.splice(0).map((app) => app.close()));
  await deleteKeys(redis, prefix);
  handled.length = 0;
  release = gate();
});

afterAll(async () => {
  await redis.quit();
});

describe('RedisTaskAdmin', () => {
  it('reports pending per client (most first), delayed, dead letters and the oldest pending age of a known state', async () => {
    const { client, admin } = await setup();
    const records = [
      ...Array.from({ length: 5 }, (_, n) =>
        new RedisTaskRecordBuilder({ key: `a${n}` }).setClientId('tenant-a').build(),
      ),
      ...Array.from({ length: 2 }, (_, n) =>
        new RedisTaskRecordBuilder({ key: `b${n}` }).setClientId('tenant-b').setPriority(3).build(),
      ),
      new RedisTaskRecordBuilder({ key: 'later' }).setClientId('tenant-c').setDelay(60_000).build(),
    ];
    const before = Date.now();
    await client.emitBatch('admin.work', records);
    await redis.lpush(
      new PrefixKeys(prefix).queue('admin.work').deadLetters,
      JSON.stringify({ id: 'x', reason: 'failed' }),
    );
    const stats = await admin.stats('admin.work');
    expect(stats).toMatchObject({
      queue: 'admin.work',
      shards: 1,
      paused: false,
      pending: { total: 7, byClient: { 'tenant-a': 5, 'tenant-b': 2 } },
      inFlight: { total: 0, byWorker: {} },
      delayed: 1,
      deadLetters: 1,
      counters: { completed: 0, failed: 0, retried: 0, deadLettered: 0, cancelled: 0, replaced: 0 },
    });
    expect(Object.keys(stats.pending.byClient)).toEqual(['tenant-a', 'tenant-b']);
    expect(stats.oldestPendingAgeMs).toBeGreaterThanOrEqual(0);
    expect(stats.oldestPendingAgeMs).toBeLessThanOrEqual(Date.now() - before + 5);
  });

  it('keeps a worker claiming every other client while one client key holds a stray SET and a weight is not a number; stats reads the broken state and names it', async () => {
    const { client, admin } = await setup();
    const queue = new PrefixKeys(prefix).queue('admin.work');
    // The state an adversarial round left: b's list overwritten by a string with b on the ring, a bad weight.
    await redis.set(queue.pending('tenant-b'), 'x');
    await redis.rpush(queue.ring, 'tenant-b');
    await redis.hset(queue.weights, 'tenant-a', 'abc');
    await redis.set(queue.counters, 'not a hash');
    const broken = await admin.stats('admin.work');
    expect(broken.faults.map((fault) => fault.subject).sort()).toEqual(
      [queue.counters, queue.pending('tenant-b')].sort(),
    );
    started.push((await startWorker(prefix, [Handlers], { concurrency: 4 })).app);
    const keys = Array.from({ length: 51 }, (_, n) => `k${n}`);
    await client.emitBatch(
      'admin.work',
      keys.map((key, n) => new RedisTaskRecordBuilder({ key }).setClientId(n % 2 ? 'tenant-a' : 'tenant-c').build()),
    );
    await waitFor(() => handled.length === keys.length, 'every task of the other clients to be handled');
    expect([...handled].sort()).toEqual([...keys].sort());
    const stats = await admin.stats('admin.work');
    expect(stats.pending.total).toBe(0);
    expect(stats.inFlight.total).toBe(0);
    expect(stats.faults.map((fault) => fault.subject).sort()).toEqual(
      [queue.counters, queue.pending('tenant-b'), `${queue.weights} tenant-a`].sort(),
    );
    expect(await redis.get(`${queue.pending('tenant-b')}:quarantined:1`)).toBe('x');
    // Dealt with: the faults are forgotten; the broken counters key is still reported while it is broken.
    await redis.del(queue.counters);
    await admin.clearFaults('admin.work');
    expect((await admin.stats('admin.work')).faults).toEqual([]);
  });

  it('lists a pattern that has tasks but never had a worker (a misspelt pattern is not invisible)', async () => {
    const { client, admin } = await setup();
    await client.emitBatch('admin.wrok', [{ key: 'typo' }]);
    expect(await admin.queues()).toContain('admin.wrok');
    expect((await admin.stats('admin.wrok')).pending.total).toBe(1);
  });

  it('counts outcomes: completed, failed, retried and dead-lettered', async () => {
    const { client, admin } = await setup();
    started.push((await startWorker(prefix, [Handlers])).app);
    for (const kind of ['ok', 'ok', 'flaky', 'always', 'poison']) {
      await firstValueFrom(client.emit('admin.outcomes', { kind }));
    }
    // ok ×2 + flaky (second run) complete; flaky's and always's first runs are retried; always's second
    // run and poison are dead-lettered: 4 failed runs in all.
    const expected = { completed: 3, failed: 4, retried: 2, deadLettered: 2, cancelled: 0, replaced: 0 };
    await waitFor(
      async () => JSON.stringify((await admin.stats('admin.outcomes')).counters) === JSON.stringify(expected),
      'the outcome counters',
    );
  });

  it("reports each run's outcome on the transport's 'task' event, without the payload", async () => {
    const { client } = await setup();
    const { transport } = await startWorker(prefix, [Handlers], { workerId: 'events-w' });
    started.push(transport);
    const events: TaskOutcomeEvent[] = [];
    transport.on('task', (event) => events.push(event));
    const ids: Record<string, string> = {};
    for (const kind of ['ok', 'flaky', 'poison']) {
      ids[kind] = (await firstValueFrom(client.emit('admin.outcomes', { kind, secret: 'do-not-log' }))).id;
    }
    await waitFor(() => events.length === 4, 'four outcomes');
    const of = (kind: string) => events.filter((event) => event.id === ids[kind]).map((event) => event.outcome);
    expect(of('ok')).toEqual(['completed']);
    expect(of('flaky')).toEqual(['retried', 'completed']);
    expect(of('poison')).toEqual(['dead-lettered']);
    const retried = events.find((event) => event.outcome === 'retried')!;
    expect(retried).toMatchObject({
      queue: 'admin.outcomes',
      clientId: 'default',
      attempt: 1,
      workerId: 'events-w',
      error: { message: 'failed' },
    });
    // A fixed 10 ms backoff with the default jitter of 0.5.
    expect(retried.retryInMs).toBeGreaterThanOrEqual(5);
    expect(retried.retryInMs).toBeLessThanOrEqual(10);
    expect(events.find((event) => event.outcome === 'dead-lettered')).toMatchObject({
      reason: 'failed',
      error: { name: 'NonRetryableTaskError' },
    });
    expect(events.every((event) => event.durationMs >= 0)).toBe(true);
    expect(JSON.stringify(events)).not.toContain('do-not-log');
  });

  it('lists workers with their lease and tasks in flight, per pattern', async () => {
    const { client, admin } = await setup();
    started.push((await startWorker(prefix, [Handlers], { workerId: 'admin-w1', leaseMs: 20_000 })).app);
    await firstValueFrom(client.emit('admin.held', { key: 'h1' }));
    await waitFor(async () => (await admin.stats('admin.held')).inFlight.total === 1, 'the held task in flight');
    const workers = await admin.workers('admin.held');
    expect(workers).toEqual([
      {
        workerId: 'admin-w1',
        queue: 'admin.held',
        leaseExpiresAt: expect.any(Number),
        lastHeartbeatAt: expect.any(Number),
        alive: true,
        inFlight: 1,
      },
    ]);
    expect(Math.abs(workers[0].lastHeartbeatAt! - Date.now())).toBeLessThan(10_000);
    expect(workers[0].leaseExpiresAt).toBeGreaterThan(Date.now() + 10_000);
    expect((await admin.stats('admin.held')).inFlight.byWorker).toEqual({ 'admin-w1': 1 });
    expect((await admin.workers()).map((w) => w.queue).sort()).toEqual(['admin.held', 'admin.outcomes', 'admin.work']);
  });

  it('pauses a queue: workers stop claiming, producers still enqueue; resume lets them go on at once', async () => {
    const { client, admin } = await setup();
    started.push((await startWorker(prefix, [Handlers], { blockTimeoutMs: 30_000 })).app);
    await firstValueFrom(client.emit('admin.work', { key: 'before' }));
    await waitFor(() => handled.includes('before'), 'the task before the pause');
    await admin.pause('admin.work');
    await client.emitBatch(
      'admin.work',
      Array.from({ length: 20 }, (_, n) => ({ key: `paused-${n}` })),
    );
    // The worker is woken by the enqueue, finds the queue paused, and claims nothing: poll a while to be sure.
    const deadline = Date.now() + 500;
    while (Date.now() < deadline) {
      expect(handled.filter((key) => key.startsWith('paused-'))).toEqual([]);
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
    const stats = await admin.stats('admin.work');
    expect(stats).toMatchObject({ paused: true, pending: { total: 20 } });
    const resumedAt = Date.now();
    await admin.resume('admin.work');
    await waitFor(
      () => handled.filter((key) => key.startsWith('paused-')).length === 20,
      'the paused tasks after resume',
    );
    // Well under the 30 s block timeout: the resume was announced, not polled for.
    expect(Date.now() - resumedAt).toBeLessThan(5_000);
    expect((await admin.stats('admin.work')).paused).toBe(false);
  });
});
