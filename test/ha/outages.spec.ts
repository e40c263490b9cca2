import { afterAll, describe, expect, it } from '@jest/globals';
import { Test } from '@nestjs/testing';
import type { Redis } from 'ioredis';
import { firstValueFrom } from 'rxjs';
import {
  ClosedError,
  RedisTaskAdmin,
  RedisTaskClient,
  RedisTaskModule,
  RedisUnavailableError,
} from '../../lib/index.js';
import { freePort, startRedisServer } from '../../scripts/redis-server.mjs';
import { testPrefix, waitFor } from '../support/redis.js';

const closing: { close(): Promise<unknown> }[] = [];

afterAll(async () => {
  await Promise.all(closing.map((item) => item.close()));
});

async function client(connection: string, enqueueTimeoutMs = 300): Promise<RedisTaskClient> {
  const module = await Test.createTestingModule({
    imports: [
      RedisTaskModule.forRoot({ connection, prefix: testPrefix('outage'), enqueueTimeoutMs, reaperIntervalMs: false }),
    ],
  }).compile();
  module.useLogger(false);
  await module.init();
  closing.push(module);
  return module.get(RedisTaskClient);
}

describe('emit during an outage: fail fast, say what happened', () => {
  it('rejects an emit to a Redis that is down within enqueueTimeoutMs, naming the pattern and server, with nothing written', async () => {
    const port = await freePort();
    const tasks = await client(`redis://:s3cret@127.0.0.1:${port}`);
    const started = Date.now();
    const error = await firstValueFrom(tasks.emit('outage.task', { n: 1 })).catch((e: unknown) => e);
    expect(Date.now() - started).toBeLessThan(3_000);
    expect(error).toBeInstanceOf(RedisUnavailableError);
    expect(error).toMatchObject({
      code: 'REDIS_UNAVAILABLE',
      pattern: 'outage.task',
      server: `127.0.0.1:${port}`,
      written: false,
    });
    expect(String((error as Error).message)).not.toContain('s3cret');
  });

  it('rejects emits once Redis stops answering mid-run (not written: the command was never handed over), and works again after', async () => {
    let server = await startRedisServer([]);
    try {
      const tasks = await client(server.url);
      await expect(tasks.emitBatch('outage.task', [{ n: 1 }])).resolves.toHaveLength(1);
      await server.kill();
      // The process is gone; once the client has seen its connection close, nothing is handed over. (Sent
      // before that, onto a socket already dead, an emit fails as maybe written: `written: 'unknown'`.)
      await waitFor(() => tasks.unwrap<Redis>().status !== 'ready', 'the client to see its connection close', {
        timeoutMs: 5_000,
      });
      const error = await tasks.emitBatch('outage.task', [{ n: 2 }]).catch((e: unknown) => e);
      expect(error).toMatchObject({ name: 'RedisUnavailableError', pattern: 'outage.task', written: false });
      server = await startRedisServer([], server.port);
      const receipts = await waitForEmit(() => tasks.emitBatch('outage.task', [{ n: 3 }]));
      expect(receipts).toHaveLength(1);
    } finally {
      await server.stop();
    }
  });

  it('settles an emit still waiting when the client is closed', async () => {
    const port = await freePort();
    const tasks = await client(`redis://127.0.0.1:${port}`, 60_000);
    const pending = firstValueFrom(tasks.emit('outage.task', { n: 1 })).catch((e: unknown) => e);
    await new Promise((resolve) => setImmediate(resolve));
    await tasks.close();
    const error = await pending;
    expect(error).toBeInstanceOf(ClosedError);
  });
});

describe('flow() and batches during an outage: answered within enqueueTimeoutMs, as an emit is', () => {
  it('rejects flow(), batch.add() and batch.seal() to a Redis that is down within enqueueTimeoutMs, nothing written', async () => {
    const port = await freePort();
    const tasks = await client(`redis://:s3cret@127.0.0.1:${port}`);
    const started = Date.now();
    const errors = await Promise.all([
      tasks.flow({ id: 'down', nodes: [{ id: 'a', pattern: 'outage.task' }] }).catch((e: unknown) => e),
      tasks
        .batch({ onComplete: { pattern: 'outage.done' } })
        .add('outage.task', [{ n: 1 }])
        .catch((e: unknown) => e),
      tasks
        .batch({ onComplete: { pattern: 'outage.done' } })
        .seal()
        .catch((e: unknown) => e),
    ]);
    expect(Date.now() - started).toBeLessThan(3_000);
    const whats = ['flow()', 'batch.add()', 'batch.seal()'];
    errors.forEach((error, i) => {
      expect(error).toBeInstanceOf(RedisUnavailableError);
      expect(error).toMatchObject({
        server: `127.0.0.1:${port}`,
        written: false,
        reason: `${whats[i]} could not reach Redis`,
      });
      expect(String((error as Error).message)).not.toContain('s3cret');
    });
  });

  it('tells a flow() whose Redis stopped answering mid-call that it may be created, naming its id; called again with it once Redis answers, it makes one flow', async () => {
    const server = await startRedisServer([]);
    try {
      const tasks = await client(server.url, 500);
      const nodes = [
        { id: 'a', pattern: 'outage.task' },
        { id: 'b', pattern: 'outage.task', deps: ['a'] },
      ];
      await expect(tasks.flow({ id: 'before', nodes })).resolves.toMatchObject({ created: true });
      process.kill(server.pid, 'SIGSTOP'); // up, connected, answering nothing
      const error = await tasks.flow({ id: 'frozen', nodes }).catch((e: unknown) => e);
      process.kill(server.pid, 'SIGCONT');
      expect(error).toBeInstanceOf(RedisUnavailableError);
      expect(error).toMatchObject({ written: 'unknown' });
      expect((error as RedisUnavailableError).reason).toBe(
        'flow() got no answer in time (calling flow() again with id "frozen" creates it at most once)',
      );
      const again = await tasks.flow({ id: 'frozen', nodes });
      expect(again.taskIds).toEqual({ a: expect.any(String), b: expect.any(String) });
      const status = await new RedisTaskAdmin(tasks).getFlow('frozen');
      expect(status).toMatchObject({ state: 'running' });
      // One flow: node a released once (its task waiting), b waiting for it.
      expect(status.nodes.map((node) => [node.id, node.state])).toEqual([
        ['a', 'released'],
        ['b', 'waiting'],
      ]);
    } finally {
      process.kill(server.pid, 'SIGCONT');
      await server.stop();
    }
  });
});

/** Retries an emit until the restarted server answers (each try fails fast). */
async function waitForEmit<T>(emit: () => Promise<T>): Promise<T> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    try {
      return await emit();
    } catch (error) {
      if (Date.now() > deadline) throw error;
      // A refused connection fails an emit at once: let the client's reconnect timer run between tries.
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
}

describe('a connection given as an ioredis instance made with lazyConnect', () => {
  it('is started by the first emit and by listen(), instead of waiting for a command that never comes', async () => {
    const { Redis } = await import('ioredis');
    const { deleteKeys, openRedis, redisUrl } = await import('../support/redis.js');
    const { startProducer, startWorker } = await import('../support/nest.js');
    const prefix = testPrefix('lazy');
    const producerConnection = new Redis(redisUrl(), { lazyConnect: true });
    const workerConnection = new Redis(redisUrl(), { lazyConnect: true });
    const worker = await startWorker(prefix, [], { connection: workerConnection });
    const { client, module } = await startProducer(prefix, { connection: producerConnection, enqueueTimeoutMs: 2_000 });
    try {
      await expect(client.emitBatch('lazy.task', [{ n: 1 }])).resolves.toHaveLength(1);
      expect(worker.transport.consuming).toBe(true);
    } finally {
      await module.close();
      await worker.app.close();
      producerConnection.disconnect();
      workerConnection.disconnect();
      const cleanup = openRedis();
      await deleteKeys(cleanup, prefix);
      await cleanup.quit();
    }
  });
});
