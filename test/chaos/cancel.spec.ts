import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from '@jest/globals';
import { Redis } from 'ioredis';
import { lastValueFrom } from 'rxjs';
import { TaskAdmin } from '../../lib/core/admin/admin.js';
import { RedisTaskClient, RedisTaskRecordBuilder, TaskCancelledError } from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { startRedisServer } from '../../scripts/redis-server.mjs';
import { testPrefix, waitFor } from '../support/redis.js';
import { startWorkerProcess, type WorkerProcess } from './processes.js';

const processes: WorkerProcess[] = [];

afterEach(async () => {
  await Promise.all(processes.splice(0).map((process) => process.kill('SIGKILL')));
});

describe('chaos: cancel a task running in another process, then kill -9 it and restart Redis from AOF', () => {
  it('aborts the handler within a heartbeat, never runs the task again after a SIGKILL and a recovery, and keeps every status across the restart', async () => {
    const prefix = testPrefix('chaos-cancel');
    const dir = mkdtempSync(join(tmpdir(), 'tasks-cancel-aof-'));
    const args = ['--appendonly', 'yes', '--appendfsync', 'always', '--dir', dir];
    let server = await startRedisServer(args);
    const direct = new Redis(server.url, { maxRetriesPerRequest: null });
    const admin = TaskAdmin.onConnection(direct, prefix);
    const client = new RedisTaskClient({ connection: server.url, prefix, track: { keepMs: 600_000 } });
    const heartbeatMs = 250;
    const env = { REDIS_URL: server.url, PREFIX: prefix, LEASE_MS: 1_000, HEARTBEAT_MS: heartbeatMs, CONCURRENCY: 5 }; // 4 tasks of one pattern, and the slot kept for idle ones (idleSlots)
    const runs = `${prefix}:runs`;
    try {
      await client.connect();
      const first = await startWorkerProcess('worker-1', env);
      processes.push(first);
      await first.waitFor('READY');
      // Four long tasks on worker-1; "victim" is cancelled while it runs, the others are recovered after the kill.
      const progress: unknown[] = [];
      const victim = lastValueFrom(
        client.send(
          'chaos.cancellable',
          new RedisTaskRecordBuilder({ key: 'victim' }).onProgress((value) => progress.push(value)).build(),
        ),
      ).catch((error: unknown) => error);
      const others = ['a', 'b', 'c'].map((key) => lastValueFrom(client.send('chaos.cancellable', { key })));
      await waitFor(
        async () => Object.keys(await direct.hgetall(runs)).length === 4,
        'the four tasks to start on worker-1',
      );
      const queue = new PrefixKeys(prefix).queue('chaos.cancellable');
      const held = await direct.hgetall(queue.processing('worker-1'));
      const victimId = Object.values(held)
        .map((entry) => JSON.parse(entry.slice(entry.indexOf('|') + 1)) as { id: string; payload: { key: string } })
        .find((envelope) => envelope.payload.key === 'victim')?.id as string;
      expect(await admin.getTask('chaos.cancellable', victimId)).toMatchObject({
        state: 'running',
        workerId: 'worker-1',
      });

      const asked = Date.now();
      expect(await admin.cancelTask('chaos.cancellable', victimId, 'chaos')).toEqual({
        cancelled: true,
        was: 'running',
      });
      const aborted = await waitFor(() => direct.hget(`${runs}:aborted`, 'victim'), 'the handler in worker-1 to abort');
      const [abortedAt, code] = aborted.split(' ');
      expect(code).toBe('TASK_CANCELLED');
      expect(Number(abortedAt) - asked).toBeLessThan(heartbeatMs + 250);
      const rejection = await victim;
      expect(rejection).toBeInstanceOf(TaskCancelledError);
      expect(rejection).toMatchObject({ taskId: victimId, reason: 'chaos' });
      expect(progress).toEqual([{ started: 'worker-1' }]);

      // kill -9 the process; another worker's reaper recovers its tasks (not the cancelled one).
      await first.kill('SIGKILL');
      const second = await startWorkerProcess('worker-2', env);
      processes.push(second);
      await waitFor(async () => (await direct.exists(queue.processing('worker-1'))) === 0, 'worker-1 to be recovered', {
        timeoutMs: 20_000,
      });
      await waitFor(
        async () => {
          const counts = await direct.hgetall(runs);
          return ['a', 'b', 'c'].every((key) => Number(counts[key]) === 2);
        },
        'the three other tasks to run again on worker-2',
        { timeoutMs: 20_000 },
      );

      // Redis crashes and comes back from its AOF: every status is as it was.
      await server.kill();
      server = await startRedisServer(args, server.port);
      await waitFor(
        async () => (await admin.getTask('chaos.cancellable', victimId).catch(() => undefined))?.state,
        'Redis to answer again',
        { timeoutMs: 20_000 },
      );
      expect(await admin.getTask('chaos.cancellable', victimId)).toMatchObject({
        state: 'cancelled',
        was: 'running',
        reason: 'chaos',
        progress: { started: 'worker-1' },
      });
      const pendingId = (
        await lastValueFrom(
          client.emit<{ id: string }>('chaos.task', new RedisTaskRecordBuilder({ key: 'p' }).setDelay(600_000).build()),
        )
      ).id;
      expect(await admin.getTask('chaos.task', pendingId)).toMatchObject({ state: 'delayed', why: 'delay' });

      // Let the others finish: each completes once more, and the cancelled task never ran again.
      await new Promise((resolve) => setTimeout(resolve, 4 * heartbeatMs));
      const counts = await direct.hgetall(runs);
      expect(Number(counts.victim)).toBe(1);
      expect(await direct.hget(queue.counters, 'cancelled')).toBe('1');
      for (const pending of others) void pending.catch(() => undefined);
      console.log(
        `cancel chaos: the running task aborted ${Number(abortedAt) - asked} ms after cancel() (heartbeat ${heartbeatMs} ms)`,
      );
    } finally {
      await Promise.all(processes.splice(0).map((process) => process.kill('SIGKILL')));
      await client.close();
      direct.disconnect();
      await server.kill();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
