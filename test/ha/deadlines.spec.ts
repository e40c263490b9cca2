import { createServer, type AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from '@jest/globals';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Test, type TestingModule } from '@nestjs/testing';
import { RedisTaskDashboardModule } from '../../lib/dashboard.js';
import { Registry } from 'prom-client';
import { firstValueFrom, lastValueFrom } from 'rxjs';
import { RedisTaskAdmin, RedisTaskClient, RedisTaskModule, RedisUnavailableError } from '../../lib/index.js';
import { REDIS_TASK_METRICS_OPTIONS, RedisTaskMetrics } from '../../lib/metrics.js';
import { redactUrl } from '../../lib/core/support/redact.js';
import { deleteKeys, openRedis, redisUrl, testPrefix, waitFor } from '../support/redis.js';
import { freePort } from '../../scripts/redis-server.mjs';
import { startProxy, type TcpProxy } from '../support/tcp-proxy.js';

// One deadline per call during an outage: send(), a first emit, admin reads and a metrics scrape answer
// within their stated time, connecting and subscribing included, and say what really happened.

const closing: { close(): Promise<unknown> }[] = [];
let proxy: TcpProxy | undefined;

afterEach(async () => {
  await Promise.all(closing.splice(0).map((item) => item.close()));
  await proxy?.close();
  proxy = undefined;
});

async function timed<T>(work: Promise<T>): Promise<{ ms: number; outcome: T | unknown }> {
  const started = Date.now();
  const outcome = await work.catch((error: unknown) => error);
  return { ms: Date.now() - started, outcome };
}

describe('one deadline per call while Redis is unreachable', () => {
  it('fails a first send() within enqueueTimeoutMs (not replyTimeoutMs), nothing written', async () => {
    const client = new RedisTaskClient({
      connection: `redis://127.0.0.1:${await freePort()}`,
      prefix: testPrefix('dl-send'),
      enqueueTimeoutMs: 600,
      replyTimeoutMs: 30_000,
    });
    closing.push(client);
    const { ms, outcome } = await timed(lastValueFrom(client.send('dl.reply', { n: 1 })));
    expect(outcome).toBeInstanceOf(RedisUnavailableError);
    expect(outcome).toMatchObject({ written: false, timeoutMs: 600 });
    expect((outcome as Error).message).toContain('nothing was written');
    expect(ms).toBeLessThan(2_500);
  });

  it('fails a first emit() to an address nobody listens on at once (refused: no wait), nothing written', async () => {
    const client = new RedisTaskClient({
      connection: `redis://127.0.0.1:${await freePort()}`,
      prefix: testPrefix('dl-emit'),
      // Were the refusal waited out, the test's own timeout would end it first.
      enqueueTimeoutMs: 60_000,
    });
    closing.push(client);
    const outcome = await firstValueFrom(client.emit('dl.event', { n: 1 })).catch((error: unknown) => error);
    expect(outcome).toBeInstanceOf(RedisUnavailableError);
    expect(outcome).toMatchObject({ written: false, refused: true });
    expect((outcome as Error).message).toMatch(
      /refused the connection for "dl.event"; nothing was written \(connect ECONNREFUSED/,
    );
  });

  it('fails a first emit() within one enqueueTimeoutMs, connecting included, and states that value', async () => {
    // A server that accepts the connection and never answers (not refused: the emit waits its deadline).
    const silent = createServer(() => undefined);
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const client = new RedisTaskClient({
      connection: `redis://127.0.0.1:${(silent.address() as AddressInfo).port}`,
      prefix: testPrefix('dl-emit'),
      enqueueTimeoutMs: 800,
    });
    closing.push(client);
    try {
      const { ms, outcome } = await timed(firstValueFrom(client.emit('dl.event', { n: 1 })));
      expect(outcome).toBeInstanceOf(RedisUnavailableError);
      expect((outcome as Error).message).toContain('within 800 ms');
      expect(ms).toBeLessThan(1_500);
    } finally {
      silent.close();
    }
  });

  it('fails a first send() of a client whose reply channel is not subscribed yet within enqueueTimeoutMs once Redis went away', async () => {
    proxy = await startProxy(Number(new URL(redisUrl()).port || 6379));
    const client = new RedisTaskClient({
      connection: proxy.url,
      prefix: testPrefix('dl-sub'),
      enqueueTimeoutMs: 600,
      replyTimeoutMs: 30_000,
    });
    closing.push(client);
    await client.connect();
    proxy.dropAfter(50);
    await waitFor(() => client.unwrap<{ status: string }>().status !== 'ready', 'the connection to notice');
    const { ms, outcome } = await timed(lastValueFrom(client.send('dl.reply', { n: 1 })));
    expect(outcome).toBeInstanceOf(RedisUnavailableError);
    expect(ms).toBeLessThan(2_500);
  });

  it('answers admin reads, a cancel and a metrics scrape in time: RedisUnavailableError, and the last values with redis_up 0', async () => {
    const prefix = testPrefix('dl-metrics');
    const redis = openRedis();
    try {
      proxy = await startProxy(Number(new URL(redisUrl()).port || 6379));
      const registry = new Registry();
      const module: TestingModule = await Test.createTestingModule({
        imports: [
          RedisTaskModule.forRoot({ connection: proxy.url, prefix, enqueueTimeoutMs: 700, reaperIntervalMs: false }),
        ],
        providers: [
          RedisTaskMetrics,
          { provide: REDIS_TASK_METRICS_OPTIONS, useValue: { registry, statsTtlMs: 0, scrapeTimeoutMs: 500 } },
        ],
      }).compile();
      module.useLogger(false);
      await module.init();
      closing.push(module);
      const client = module.get(RedisTaskClient);
      await firstValueFrom(client.emit('dl.q', { n: 1 }));
      module.get(RedisTaskMetrics);
      expect(await registry.getSingleMetricAsString('redis_tasks_queue_depth')).toContain(
        'redis_tasks_queue_depth{queue="dl.q"} 1',
      );
      expect(await registry.getSingleMetricAsString('redis_tasks_redis_up')).toContain('redis_tasks_redis_up 1');

      proxy.dropAfter(50);
      await waitFor(() => client.unwrap<{ status: string }>().status !== 'ready', 'the connection to notice');
      const scrape = await timed(registry.metrics());
      expect(scrape.ms).toBeLessThan(2_000);
      expect(String(scrape.outcome)).toContain('redis_tasks_redis_up 0');
      expect(String(scrape.outcome)).toContain('redis_tasks_queue_depth{queue="dl.q"} 1');
      const stats = await timed(module.get(RedisTaskAdmin).stats('dl.q'));
      expect(stats.outcome).toBeInstanceOf(RedisUnavailableError);
      expect(stats.ms).toBeLessThan(2_000);
      const task = await timed(module.get(RedisTaskAdmin).getTask('dl.q', 'some-task'));
      expect(task.outcome).toBeInstanceOf(RedisUnavailableError);
      expect(task.ms).toBeLessThan(2_000);
      const cancel = await timed(client.cancel('dl.q', 'some-task'));
      expect(cancel.outcome).toBeInstanceOf(RedisUnavailableError);
      expect((cancel.outcome as Error).message).toContain('cancel()');
      expect(cancel.ms).toBeLessThan(2_000);
    } finally {
      await deleteKeys(redis, prefix);
      await redis.quit();
    }
  });
});

describe('the admin API: one deadline, applied once', () => {
  it('answers every operation, flat or as a noun, with RedisUnavailableError while Redis refuses the connection', async () => {
    const client = new RedisTaskClient({
      connection: `redis://127.0.0.1:${await freePort()}`,
      prefix: testPrefix('dl-admin'),
      enqueueTimeoutMs: 60_000,
    });
    closing.push(client);
    const admin = new RedisTaskAdmin(client);
    const nouns = {
      schedules: admin.schedules,
      deadLetters: admin.deadLetters,
      tasks: admin.tasks,
      batches: admin.batches,
      clients: admin.clients,
    };
    const flat = Object.entries(admin).filter(([, value]) => typeof value === 'function') as [
      string,
      (...args: unknown[]) => Promise<unknown>,
    ][];
    // Every operation the admin forwards (the methods' count is the API's; a new one joins by itself).
    expect(flat.length).toBeGreaterThanOrEqual(26);
    // A noun's call is the very same function as its flat name (an alias, not a second path).
    const flatFunctions = new Set(flat.map(([, call]) => call));
    for (const [noun, calls] of Object.entries(nouns))
      for (const [name, call] of Object.entries(calls))
        expect([noun, name, flatFunctions.has(call)]).toEqual([noun, name, true]);
    for (const [name, call] of flat) {
      const outcome = await call.call(admin, 'p', 'a', 1).catch((error: unknown) => error);
      expect([name, outcome instanceof RedisUnavailableError]).toEqual([name, true]);
    }
  });
});

describe('the dashboard API while Redis is unreachable', () => {
  it('answers 503 within enqueueTimeoutMs, then reads again once Redis is back', async () => {
    proxy = await startProxy(Number(new URL(redisUrl()).port || 6379));
    const connection = proxy.url;
    @Module({
      imports: [RedisTaskDashboardModule.forRoot({ path: 'queues', connection, prefix: testPrefix('dl-dash') })],
    })
    class AppModule {}
    const app = await NestFactory.create(AppModule, { logger: false });
    await app.listen(0, '127.0.0.1');
    closing.push(app);
    const url = `${await app.getUrl()}/queues/api/overview`.replace('[::1]', '127.0.0.1');
    expect((await fetch(url)).status).toBe(200);
    proxy.dropAfter(50);
    await new Promise((resolve) => setTimeout(resolve, 200));
    const started = Date.now();
    const answer = await fetch(url);
    expect(answer.status).toBe(503);
    expect(Date.now() - started).toBeLessThan(12_000);
  });
});

describe('redacting a URL', () => {
  it('hides a password holding an unencoded "@" whole', () => {
    expect(redactUrl('redis://:P@ss-SECRET-99@host:6379')).toBe('redis://:***@host:6379');
    expect(redactUrl('redis://user:pw@host:1/0')).toBe('redis://user:***@host:1/0');
    expect(redactUrl('redis://host:6379')).toBe('redis://host:6379');
  });
});
