import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { EventPattern, Payload } from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import { firstValueFrom } from 'rxjs';
import { Redis } from 'ioredis';
import {
  RedisConfigurationError,
  RedisTaskClient,
  RedisTaskAdmin,
  RedisTaskModule,
  RedisTaskReaper,
  RedisTaskTransport,
  RedisUnavailableError,
  type RedisTaskStatus,
} from '../../lib/index.js';
import { RedisTaskDashboardModule } from '../../lib/dashboard.js';
import { freePort, startRedisServer, type RedisServer } from '../../scripts/redis-server.mjs';
import { startProducer } from '../support/nest.js';
import { testPrefix, waitFor } from '../support/redis.js';

const handled = new Set<string>();
const servers: RedisServer[] = [];
const dir = mkdtempSync(join(tmpdir(), 'tasks-tls-'));

@Controller()
class StartupHandlers {
  @EventPattern<string>('startup.task')
  task(@Payload() task: { key: string }): void {
    handled.add(task.key);
  }
}

afterAll(async () => {
  await Promise.all(servers.map((server) => server.stop()));
  rmSync(dir, { recursive: true, force: true });
});

async function listen(options: ConstructorParameters<typeof RedisTaskTransport>[0]) {
  const module = await Test.createTestingModule({ controllers: [StartupHandlers] }).compile();
  const transport = new RedisTaskTransport({ prefix: testPrefix('startup'), ...options });
  const app = module.createNestMicroservice({ strategy: transport, logger: false });
  return { app, transport, listening: app.listen() };
}

describe('a worker started before Redis', () => {
  it('waits (status reconnecting) until Redis answers, then starts and handles tasks', async () => {
    const port = await freePort();
    const { app, transport, listening } = await listen({ connection: `redis://127.0.0.1:${port}` });
    const statuses: RedisTaskStatus[] = [];
    transport.on('status', (status) => statuses.push(status));
    try {
      await waitFor(() => transport.currentStatus === 'reconnecting', 'the worker to report reconnecting');
      const server = await startRedisServer([], port);
      servers.push(server);
      await listening;
      expect(transport.consuming).toBe(true);
      const { client, module } = await startProducer(transport.options.prefix, { connection: server.url });
      await firstValueFrom(client.emit('startup.task', { key: 'late' }));
      await waitFor(() => handled.has('late'), 'the task to be handled');
      await module.close();
    } finally {
      await app.close();
    }
  });

  it('gives up after startupTimeoutMs with RedisUnavailableError naming the server', async () => {
    const port = await freePort();
    const { app, listening } = await listen({ connection: `redis://127.0.0.1:${port}`, startupTimeoutMs: 300 });
    await expect(listening).rejects.toMatchObject({ name: 'RedisUnavailableError', server: `127.0.0.1:${port}` });
    await app.close();
  });
});

describe('permanent misconfiguration fails fast instead of "retrying until Redis answers"', () => {
  it('a wrong password: listen() and emit fail at once with RedisConfigurationError, the password not shown', async () => {
    const server = await startRedisServer([]);
    servers.push(server);
    const setup = new Redis(server.url);
    await setup.config('SET', 'requirepass', 'right-one');
    setup.disconnect();
    const connection = `redis://:wrong-one@127.0.0.1:${server.port}`;
    const started = Date.now();
    const { app, listening } = await listen({ connection });
    const error = await listening.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RedisConfigurationError);
    expect(String((error as Error).message)).toMatch(/WRONGPASS/);
    expect(String((error as Error).message)).not.toContain('wrong-one');
    await app.close();
    const { client, module } = await startProducer(testPrefix('startup'), {
      connection,
      enqueueTimeoutMs: 20_000,
    }).catch(async (e: unknown) => {
      expect(e).toBeInstanceOf(RedisConfigurationError);
      return { client: undefined, module: undefined };
    });
    expect(client).toBeUndefined();
    await module?.close();
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it('an untrusted TLS certificate, and redis:// to a TLS port: RedisConfigurationError naming the cause', async () => {
    const made = spawnSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'rsa:2048',
        '-nodes',
        '-keyout',
        join(dir, 'key.pem'),
        '-out',
        join(dir, 'cert.pem'),
        '-days',
        '1',
        '-subj',
        '/CN=localhost',
      ],
      { encoding: 'utf8' },
    );
    expect(made.status).toBe(0);
    const tlsPort = await freePort();
    const server = await startRedisServer([
      '--tls-port',
      String(tlsPort),
      '--tls-cert-file',
      join(dir, 'cert.pem'),
      '--tls-key-file',
      join(dir, 'key.pem'),
      '--tls-auth-clients',
      'no',
    ]);
    servers.push(server);
    for (const [connection, cause] of [
      [`rediss://127.0.0.1:${tlsPort}`, /TLS connection failed \(DEPTH_ZERO_SELF_SIGNED_CERT/],
      [`redis://127.0.0.1:${tlsPort}`, /may expect TLS \(use rediss:\/\/\)/],
    ] as const) {
      const { app, listening } = await listen({ connection });
      const error = await listening.catch((e: unknown) => e);
      expect(error).toBeInstanceOf(RedisConfigurationError);
      expect(String((error as Error).message)).toMatch(cause);
      await app.close();
      const emitted = await startProducer(testPrefix('startup'), { connection, enqueueTimeoutMs: 20_000 })
        .then(({ client, module }) => client.emitBatch('startup.task', [{ key: 'x' }]).finally(() => module.close()))
        .catch((e: unknown) => e);
      expect(emitted).toBeInstanceOf(RedisConfigurationError);
    }
  });
});

/** The kinds of handle (sockets, timers) the process holds now, counted. */
function activeResources(): Map<string, number> {
  const counts = new Map<string, number>();
  for (const kind of process.getActiveResourcesInfo()) counts.set(kind, (counts.get(kind) ?? 0) + 1);
  return counts;
}

describe('an HTTP app whose Redis is unreachable (the starter with RedisTaskModule, Redis down)', () => {
  it('init() and close() wait for nothing from Redis, an emit fails at once with RedisUnavailableError, and no handle is left', async () => {
    const port = await freePort();
    const connection = `redis://127.0.0.1:${port}`;
    // Anything waiting on Redis would wait this long: far past the test's own timeout.
    const enqueueTimeoutMs = 120_000;
    const before = activeResources();
    const module = await Test.createTestingModule({
      imports: [
        RedisTaskModule.forRoot({ connection, prefix: testPrefix('down'), enqueueTimeoutMs }),
        RedisTaskDashboardModule.forRoot({ connection, path: 'queues' }),
      ],
    }).compile();
    const app = module.createNestApplication({ logger: false });
    await app.init();
    const client = app.get(RedisTaskClient);
    expect(app.get(RedisTaskReaper)).toBeInstanceOf(RedisTaskReaper);
    await expect(firstValueFrom(client.emit('down.task', { n: 1 }))).rejects.toBeInstanceOf(RedisUnavailableError);
    await expect(firstValueFrom(client.emit('down.task', { n: 2 }))).rejects.toMatchObject({
      code: 'REDIS_UNAVAILABLE',
      written: false,
    });
    await app.close();
    // Nothing of the app is left running: the handles are those there were before it.
    await waitFor(
      () => {
        const after = activeResources();
        return [...after].every(([kind, count]) => count <= (before.get(kind) ?? 0));
      },
      `no handle left after close() (before ${JSON.stringify([...before])})`,
      { timeoutMs: 2_000 },
    );
  }, 15_000);

  it('the reaper and the schedule ticker start by themselves once Redis answers', async () => {
    const port = await freePort();
    const prefix = testPrefix('late-reaper');
    const module = await Test.createTestingModule({
      imports: [RedisTaskModule.forRoot({ connection: `redis://127.0.0.1:${port}`, prefix, scheduleCheckMs: 100 })],
    }).compile();
    const app = module.createNestApplication({ logger: false });
    await app.init();
    try {
      const server = await startRedisServer([], port);
      servers.push(server);
      const client = app.get(RedisTaskClient);
      const admin = new RedisTaskAdmin(client);
      // The pattern's shard count on record first (a schedule never decides it), then a schedule every 200 ms.
      await waitFor(
        async () => (await firstValueFrom(client.emit('late.task', { n: 0 })).catch(() => null)) !== null,
        'an emit accepted once Redis answers',
      );
      await admin.upsertSchedule('late-every', { pattern: 'late.task', everyMs: 200 });
      await waitFor(async () => {
        const state = (await admin.listSchedules()).find((info) => info.id === 'late-every')?.state;
        // The first tick's task waits (no worker here): later ticks are skipped (overlap 'skip'), ticks all the same.
        return state !== undefined && state.fired === 1 && state.skipped >= 1;
      }, 'the schedule to tick (the ticker started once Redis answered)');
    } finally {
      await app.close();
    }
  });
});
