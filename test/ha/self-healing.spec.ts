import { createHash } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { Controller, type LoggerService } from '@nestjs/common';
import { Ctx, EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import { Redis } from 'ioredis';
import { firstValueFrom } from 'rxjs';
import {
  RedisTaskContext,
  RedisTaskRecordBuilder,
  RedisTaskStatus,
  RedisTaskTransport,
  type RedisTaskTransportOptions,
} from '../../lib/index.js';
import { scriptDefinitions } from '../../lib/core/redis/scripts.js';
import { startRedisServer, type RedisServer } from '../../scripts/redis-server.mjs';
import { startProducer } from '../support/nest.js';
import { clientList, testPrefix, waitFor } from '../support/redis.js';
import { scriptFlagsOn } from '../../lib/core/redis/script-flags.js';
import { startProxy, type TcpProxy } from '../support/tcp-proxy.js';

const handled = new Map<string, number>();
const workers = new Set<string>();
const started: { close(): Promise<unknown> }[] = [];
let server: RedisServer;
let admin: Redis;
let proxy: TcpProxy | undefined;

@Controller()
class Handlers {
  @EventPattern<string>('heal')
  async heal(@Payload() payload: { key: string }, @Ctx() ctx: RedisTaskContext): Promise<void> {
    handled.set(payload.key, (handled.get(payload.key) ?? 0) + 1);
    workers.add(ctx.getWorkerId());
    await new Promise((resolve) => setImmediate(resolve));
  }

  @MessagePattern<string>('heal.double')
  double(@Payload() payload: { n: number }): number {
    return payload.n * 2;
  }
}

/** Keeps what the transport logs, to check an outage is logged once with its length. */
class Captured implements LoggerService {
  readonly lines: string[] = [];
  log(message: string) {
    this.lines.push(`log ${message}`);
  }
  warn(message: string) {
    this.lines.push(`warn ${message}`);
  }
  error(message: string) {
    this.lines.push(`error ${message}`);
  }
  debug() {}
  verbose() {}
}

async function worker(url: string, prefix: string, options: RedisTaskTransportOptions) {
  const module = await Test.createTestingModule({ controllers: [Handlers] }).compile();
  const transport = new RedisTaskTransport({ connection: url, prefix, ...options });
  const statuses: RedisTaskStatus[] = [];
  transport.on('status', (status) => statuses.push(status));
  const logger = new Captured();
  const app = module.createNestMicroservice({ strategy: transport, logger });
  await app.listen();
  started.push(app);
  return { transport, statuses, logger };
}

/** A connection of the test server by name (CLIENT LIST): blocked in a command or not, and seconds since its last. */
async function connectionNamed(name: string): Promise<{ blocked: boolean; idleSeconds: number } | undefined> {
  const found = (await clientList(admin)).find((client) => client.name === name);
  return found && { blocked: found.flags.includes('b'), idleSeconds: Number(found.idle) };
}

/** Closes an app; resolves 'closed', or says it is still closing once `ms` passed (a hang, not a slow close). */
async function closeWithin(app: { close(): Promise<unknown> }, ms: number): Promise<string> {
  let timer: NodeJS.Timeout | undefined;
  const closed = await Promise.race([
    app.close().then(() => 'closed'),
    new Promise<string>((resolve) => (timer = setTimeout(() => resolve(`still closing after ${ms / 1000} s`), ms))),
  ]);
  clearTimeout(timer);
  return closed;
}

async function killWorkerConnections(workerId: string): Promise<number> {
  const ids = (await clientList(admin))
    .filter((client) => client.name.startsWith(`tasks:worker:${workerId}`))
    .map((client) => client.id);
  for (const id of ids) {
    await admin.client('KILL', 'ID', id);
  }
  return ids.length;
}

beforeAll(async () => {
  server = await startRedisServer(); // its own server: CLIENT PAUSE stops every client of it
  admin = new Redis(server.url);
});

afterEach(async () => {
  await Promise.all(started.splice(0).map((app) => app.close()));
  await proxy?.close();
  proxy = undefined;
  handled.clear();
  workers.clear();
});

afterAll(async () => {
  admin?.disconnect();
  await server?.stop();
});

describe('self-healing worker', () => {
  it('completes every task through a CLIENT KILL of all its connections and a 2 s CLIENT PAUSE, without a restart', async () => {
    const prefix = testPrefix('heal');
    // The producer first: its testing module turns Nest's global logger off, the worker's turns it to ours.
    const { client, module } = await startProducer(prefix, { connection: server.url });
    started.push(module);
    const { statuses, logger } = await worker(server.url, prefix, {
      workerId: 'healer',
      concurrency: 8,
      heartbeatIntervalMs: 200,
      leaseMs: 10_000,
    });
    const total = 6_000;
    for (let start = 0; start < total; start += 1_000) {
      await client.emitBatch(
        'heal',
        Array.from({ length: 1_000 }, (_, i) =>
          new RedisTaskRecordBuilder({ key: `k${start + i}` }).setClientId(`c${i % 4}`).build(),
        ),
      );
    }
    await waitFor(() => handled.size >= 1_000, 'the run to be under way', { timeoutMs: 30_000 });
    const killed = await killWorkerConnections('healer');
    expect(killed).toBe(3); // commands, the blocking read, and the subscriber (due times, resumes, wake-ups)
    await waitFor(() => handled.size >= 3_000, 'claiming to resume after CLIENT KILL', { timeoutMs: 30_000 });
    await admin.client('PAUSE', 2_000, 'ALL');
    await waitFor(() => handled.size === total, 'every task handled', { timeoutMs: 60_000, intervalMs: 50 });
    expect(workers).toEqual(new Set(['healer']));
    // At least once: a claim whose reply the kill cut is returned and run again, never lost.
    expect([...handled.values()].every((count) => count >= 1)).toBe(true);
    expect(statuses).toContain(RedisTaskStatus.RECONNECTING);
    expect(statuses.at(-1)).toBe(RedisTaskStatus.CONNECTED);
    const outages = logger.lines.filter((line) => line.startsWith('error Redis connection failed'));
    const recoveries = logger.lines.filter((line) =>
      /^log Redis connection recovered: it was down for \d+ ms$/.test(line),
    );
    expect(outages.length).toBe(1);
    expect(recoveries.length).toBe(1);
  }, 120_000);

  it('has the watchdog reconnect a worker whose connections went silent (half-open), so waiting tasks still run', async () => {
    proxy = await startProxy(server.port);
    const prefix = testPrefix('watchdog');
    const { client, module } = await startProducer(prefix, { connection: server.url });
    started.push(module);
    const { statuses, logger } = await worker(proxy.url, prefix, {
      workerId: 'silent',
      blockTimeoutMs: 500,
      watchdogTimeoutMs: 500,
      heartbeatIntervalMs: 200,
      leaseMs: 30_000,
    });
    await firstValueFrom(client.emit('heal', { key: 'before' }));
    await waitFor(() => handled.has('before'), 'the first task');
    proxy.freeze(); // every connection of the worker now goes nowhere, and nothing tells it
    await firstValueFrom(client.emit('heal', { key: 'after' }));
    await waitFor(() => handled.has('after'), 'the task emitted after the freeze', { timeoutMs: 20_000 });
    const recovered = /^log Redis, as the watchdog of worker silent sees it, recovered: it was down for \d+ ms$/;
    await waitFor(
      () => logger.lines.some((line) => recovered.test(line)),
      'the watchdog to log the end of the stall with its length',
    );
    expect(
      logger.lines.filter((line) => line.startsWith('error Redis, as the watchdog of worker silent sees it, failed'))
        .length,
    ).toBe(1);
    const stalled = statuses.indexOf(RedisTaskStatus.STALLED);
    expect(stalled).toBeGreaterThan(0);
    expect(statuses.slice(stalled)).toContain(RedisTaskStatus.CONNECTED);
  }, 60_000);

  it("has the watchdog reconnect a subscriber gone silent (half-open), and its idle loops still run a task when their bells' watch went silent too", async () => {
    proxy = await startProxy(server.port);
    const prefix = testPrefix('deaf');
    const { client, module } = await startProducer(prefix, { connection: server.url });
    started.push(module);
    const { logger } = await worker(proxy.url, prefix, {
      workerId: 'deaf',
      blockTimeoutMs: 120_000, // the backstop is not what finds the task below
      watchdogTimeoutMs: 500,
    });
    await firstValueFrom(client.emit('heal', { key: 'deaf-before' }));
    await waitFor(() => handled.has('deaf-before'), 'the first task');
    // The loop that ran it waits on the blocking connection for at most a second, then gives it up: from
    // then on the idle loops wait there together, in one BLPOP of their bells (BellWatch), renewed every 5 s.
    await waitFor(async () => {
      const wait = await connectionNamed('tasks:worker:deaf:wait');
      return wait !== undefined && wait.blocked && wait.idleSeconds >= 2;
    }, 'the idle loops to watch their bells');
    // The subscriber's socket and the watch's now go nowhere, and nothing tells them: the subscriber is PINGed
    // (and cut), the watch cut once overdue; either finds the task.
    proxy.freeze('tasks:worker:deaf:due');
    proxy.freeze('tasks:worker:deaf:wait');
    await firstValueFrom(client.emit('heal', { key: 'deaf-after' }));
    await waitFor(() => handled.has('deaf-after'), 'the task emitted after the subscriber went silent', {
      timeoutMs: 20_000,
    });
    const failed = 'error The subscriber connection of worker deaf failed: no reply to PING for';
    expect(logger.lines.filter((line) => line.startsWith(failed))).toHaveLength(1);
    await waitFor(
      () =>
        logger.lines.some((line) =>
          /^log The subscriber connection of worker deaf recovered: it was down for \d+ ms$/.test(line),
        ),
      'the recovery logged with its length',
    );
  }, 60_000);
  it("cuts the idle loops' watch of their bells when it goes silent (half-open): the task whose message it left unheeded runs once the watch is back", async () => {
    proxy = await startProxy(server.port);
    const prefix = testPrefix('deaf-watch');
    const { client, module } = await startProducer(prefix, { connection: server.url });
    started.push(module);
    await worker(proxy.url, prefix, { workerId: 'deafwatch', blockTimeoutMs: 120_000 });
    // One watch of every idle loop's bell, under way for a second (a loop that began waiting later would have
    // ended the first one: CLIENT UNBLOCK).
    await waitFor(async () => {
      const wait = await connectionNamed('tasks:worker:deafwatch:wait');
      return wait !== undefined && wait.blocked && wait.idleSeconds >= 1;
    }, 'the idle loops to watch their bells');
    // The watch's socket goes nowhere: the push's token waits on the bell, and the watch covers the loop (its
    // message is left unheeded) until the watch is overdue (its hold and 2 s): then it is cut, ioredis connects
    // again and sends the BLPOP again, which takes the token. The backstop (two minutes) finds nothing here.
    proxy.freeze('tasks:worker:deafwatch:wait');
    await firstValueFrom(client.emit('heal', { key: 'after-silent-watch' }));
    await waitFor(() => handled.has('after-silent-watch'), 'the task, once the watch is cut and back', {
      timeoutMs: 20_000,
    });
  }, 60_000);
});

describe('Redis that forgot the scripts (SCRIPT FLUSH, as after a restart or a failover to a fresh replica)', () => {
  it('runs every script again: emits, claims, acknowledgements and replies go on with nothing lost', async () => {
    const prefix = testPrefix('flushed');
    const { client, module } = await startProducer(prefix, { connection: server.url });
    started.push(module);
    await worker(server.url, prefix, { workerId: 'flushed', concurrency: 4 });
    await firstValueFrom(client.emit('heal', { key: 'before' }));
    await expect(firstValueFrom(client.send('heal.double', { n: 2 }))).resolves.toBe(4);
    await waitFor(() => handled.has('before'), 'the first task');
    // The enqueue script: only this test's producer runs it (the worker's own scripts may be loaded again
    // by its heartbeat or claims at any moment after the flush).
    const enqueueScript = scriptDefinitions().find((script) => script.name === 'enqueueTasks');
    // As this server is sent it: under its Redis 7 flags line where the server reads flags.
    const sha = createHash('sha1')
      .update((scriptFlagsOn() ? enqueueScript?.flagged.source : enqueueScript?.source) ?? '')
      .digest('hex');
    const cached = async () => ((await admin.script('EXISTS', sha)) as number[])[0];
    expect(await cached()).toBe(1);
    await admin.script('FLUSH');
    expect(await cached()).toBe(0);
    // Every call below first meets NOSCRIPT (the worker's blocked claim included, once it wakes).
    const receipts = await Promise.all(
      Array.from({ length: 20 }, (_, i) => firstValueFrom(client.emit('heal', { key: `after${i}` }))),
    );
    expect(receipts.every((receipt) => !receipt.duplicate)).toBe(true);
    await expect(firstValueFrom(client.send('heal.double', { n: 21 }))).resolves.toBe(42);
    await waitFor(
      () => Array.from({ length: 20 }, (_, i) => `after${i}`).every((key) => handled.has(key)),
      'every task emitted after the flush',
    );
    expect(await cached()).toBe(1);
  }, 30_000);
});

describe('outage log lines', () => {
  it('closes a worker whose blocking connection waits between two reconnection attempts (it used to hang forever)', async () => {
    const own = await startRedisServer();
    // Attempts 1.5 s apart: the blocking connection spends the outage between two attempts. One retry per
    // command on the main connection, so the shutdown's own commands give up quickly while Redis is down.
    const connection = new Redis(own.url, { maxRetriesPerRequest: 1, retryStrategy: () => 1_500 });
    connection.on('error', () => undefined);
    try {
      const { logger } = await worker(own.url, testPrefix('close-outage'), {
        connection,
        heartbeatIntervalMs: 100,
        leaseMs: 5_000,
        watchdogTimeoutMs: 200,
        blockTimeoutMs: 100,
      });
      const app = started.pop()!;
      await own.kill();
      await waitFor(
        () => logger.lines.some((line) => line.includes('Redis is unreachable')),
        'the claim loop to wait on a reconnecting connection',
      );
      expect(await closeWithin(app, 20_000)).toBe('closed');
    } finally {
      connection.disconnect();
      await own.stop();
    }
  }, 40_000);

  it('closes a worker within seconds while Redis stays down, its unfinished tasks left held for recovery (it took ~100 s)', async () => {
    const own = await startRedisServer();
    try {
      // The library's own connection settings (no user instance): ioredis keeps commands while it reconnects.
      const { logger } = await worker(own.url, testPrefix('close-down'), {
        heartbeatIntervalMs: 100,
        leaseMs: 5_000,
        watchdogTimeoutMs: 200,
        blockTimeoutMs: 100,
        shutdownTimeoutMs: 200,
      });
      const app = started.pop()!;
      await own.kill();
      await waitFor(
        () => logger.lines.some((line) => line.includes('Redis is unreachable')),
        'the worker to see Redis gone',
      );
      expect(await closeWithin(app, 15_000)).toBe('closed');
      expect(logger.lines.some((line) => line.includes('stay held'))).toBe(true);
    } finally {
      await own.stop();
    }
  }, 40_000);

  it('calls Redis unreachable, never a stuck handshake, while each reconnection attempt fails quickly', async () => {
    proxy = await startProxy(server.port);
    // Attempts 10 ms apart, each held 150 ms and then cut: ioredis is nearly always mid-attempt
    // ('connecting' or 'connect'), each attempt well within the watchdog's 400 ms. The watchdog used to
    // read that as a handshake stuck past its due time, and cut the attempt itself.
    const connection = new Redis(proxy.url, { retryStrategy: () => 10 });
    connection.on('error', () => undefined);
    const { logger } = await worker(proxy.url, testPrefix('refused'), {
      connection,
      heartbeatIntervalMs: 100,
      leaseMs: 5_000,
      watchdogTimeoutMs: 400,
      blockTimeoutMs: 100,
      shutdownTimeoutMs: 200,
    });
    const app = started.pop()!;
    try {
      proxy.dropAfter(150);
      const watchdogLine = /^error Redis, as the watchdog of worker .* sees it, failed: /;
      const line = await waitFor(
        () => logger.lines.find((entry) => watchdogLine.test(entry)),
        'the watchdog to report the outage',
      );
      expect(line).toContain('Redis is unreachable');
    } finally {
      expect(await closeWithin(app, 15_000)).toBe('closed');
      connection.disconnect();
    }
  }, 40_000);

  it('measure an outage from when the connection was lost, and call a dead Redis unreachable, not half-open', async () => {
    const own = await startRedisServer();
    let restarted: RedisServer | undefined;
    try {
      const { logger } = await worker(own.url, testPrefix('outage-log'), {
        heartbeatIntervalMs: 100,
        leaseMs: 5_000,
        watchdogTimeoutMs: 200,
        blockTimeoutMs: 100,
      });
      const app = started[started.length - 1];
      await own.kill();
      const downAt = Date.now();
      await waitFor(
        () => logger.lines.some((line) => line.includes('Redis is unreachable')),
        'the watchdog to report Redis unreachable',
      );
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, 1_500 - (Date.now() - downAt)))); // the outage lasts 1.5 s
      restarted = await startRedisServer([], own.port);
      const recovered = /^log Redis, as the watchdog of worker .* sees it, recovered: it was down for (\d+) ms$/;
      const line = await waitFor(
        () => logger.lines.find((entry) => recovered.test(entry)),
        'the watchdog to see Redis again',
      ).catch((error: unknown) => {
        throw new Error(`${(error as Error).message}\n${logger.lines.join('\n')}`);
      });
      expect(Number(recovered.exec(line)?.[1])).toBeGreaterThanOrEqual(1_500);
      expect(logger.lines.some((entry) => entry.includes('half-open'))).toBe(false);
      await app.close();
    } finally {
      await restarted?.stop();
      await own.stop();
    }
  });
});
