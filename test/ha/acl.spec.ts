import { execFile } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { HealthCheckService } from '@nestjs/terminus';
import { Redis } from 'ioredis';
import { firstValueFrom } from 'rxjs';
import { aclRule, RedisTaskAdmin, RedisTaskClient, RedisTaskRecordBuilder } from '../../lib/index.js';
import { RedisTaskMetrics } from '../../lib/metrics.js';
import { RedisTaskHealthIndicator } from '../../lib/terminus.js';
import { DashboardService } from '../../lib/nest/dashboard/dashboard.service.js';
import { resolveSettings } from '../../lib/nest/dashboard/dashboard.options.js';
import { Everything, FEATURES, KEEP_MS } from '../e2e/fixtures/feature-tour.js';
import { startRedisServer, type RedisServer } from '../../scripts/redis-server.mjs';
import { startProducer, startWorker, startOpsModule } from '../support/nest.js';
import { testPrefix, waitFor } from '../support/redis.js';

const handled = new Set<string>();

@Controller()
class AclHandlers {
  @EventPattern<string>('acl.task')
  task(@Payload() task: { key: string }): void {
    handled.add(task.key);
  }

  @MessagePattern('acl.sum')
  sum(@Payload() numbers: number[]): number {
    return numbers.reduce((a, b) => a + b, 0);
  }
}

let server: RedisServer;
let admin: Redis;

beforeAll(async () => {
  server = await startRedisServer([]);
  admin = new Redis(server.url);
});

afterAll(async () => {
  admin.disconnect();
  await server.stop();
});

/** Runs a worker, a producer (emit, emitBatch, send, with retries and delays) and the admin API as `user`. */
async function runAs(user: string, prefix: string): Promise<void> {
  const connection = `redis://${user}:pw-${user}@127.0.0.1:${server.port}`;
  const worker = await startWorker(prefix, [AclHandlers], { connection, reaperIntervalMs: 50 }, []);
  const { client, module } = await startProducer(prefix, { connection });
  try {
    const keys = Array.from({ length: 20 }, (_, i) => `${user}-${i}`);
    await client.emitBatch(
      'acl.task',
      keys.slice(0, 10).map((key) => ({ key })),
    );
    for (const key of keys.slice(10)) await firstValueFrom(client.emit('acl.task', { key }));
    expect(await firstValueFrom(client.send('acl.sum', [1, 2, 3]))).toBe(6);
    await waitFor(() => keys.every((key) => handled.has(key)), `every task of ${user} to be handled`);
    const stats = await new RedisTaskAdmin(client).stats('acl.task');
    expect(stats.counters.completed).toBe(20);
    expect(stats.faults).toEqual([]);
  } finally {
    await module.close();
    await worker.app.close();
  }
}

describe('least-privilege Redis ACL users', () => {
  it('runs workers, producers and the admin API as a user limited to the documented commands and to ~prefix:* and &prefix:*', async () => {
    const prefix = testPrefix('acl-least');
    await admin.call('ACL', 'SETUSER', 'least', 'on', '>pw-least', ...aclRule(prefix).split(' '));
    await runAs('least', prefix);
  });

  it('runs under the rule a reader would write (~prefix:* &prefix:* +@all -@dangerous): INFO and CONFIG refused only warn', async () => {
    const prefix = testPrefix('acl-reader');
    await admin.call(
      'ACL',
      'SETUSER',
      'reader',
      'on',
      '>pw-reader',
      `~${prefix}:*`,
      `&${prefix}:*`,
      '+@all',
      '-@dangerous',
    );
    await runAs('reader', prefix);
  });

  it('fails start-up and emits at once with RedisPermissionError for a user whose key pattern does not cover the prefix', async () => {
    const prefix = testPrefix('acl-narrow');
    await admin.call('ACL', 'SETUSER', 'narrow', 'on', '>pw-narrow', '~other:*', '&other:*', '+@all', '-@dangerous');
    const error = await startWorker(prefix, [AclHandlers], {
      connection: `redis://narrow:pw-narrow@127.0.0.1:${server.port}`,
    }).catch((e: unknown) => e);
    expect(error).toMatchObject({ name: 'RedisPermissionError', code: 'REDIS_PERMISSION', prefix });
    expect(String((error as Error).message)).toMatch(/NOPERM .*aclRule\(/);
    expect(String((error as Error).message)).not.toContain('pw-narrow');
    const { client, module } = await startProducer(prefix, {
      connection: `redis://narrow:pw-narrow@127.0.0.1:${server.port}`,
    });
    try {
      await expect(client.emitBatch('acl.task', [{ key: 'x' }])).rejects.toMatchObject({
        name: 'RedisPermissionError',
      });
    } finally {
      await module.close();
    }
  });
});

describe('an ACL that refuses one command the claim script uses', () => {
  it('loses no task while LREM is refused (each claimed entry is held before the refused step), and completes all once it is granted', async () => {
    const prefix = testPrefix('acl-lrem');
    await admin.call('ACL', 'SETUSER', 'nolrem', 'on', '>pw-nolrem', ...aclRule(prefix).split(' '), '-lrem');
    const connection = `redis://nolrem:pw-nolrem@127.0.0.1:${server.port}`;
    const worker = await startWorker(prefix, [AclHandlers], {
      connection,
      heartbeatIntervalMs: 100,
      leaseMs: 2_000,
      prefetch: 2,
    });
    const { client, module } = await startProducer(prefix, { connection });
    try {
      const keys = Array.from({ length: 30 }, (_, i) => `lrem-${i}`);
      await client.emitBatch(
        'acl.task',
        keys.map((key, i) => ({ key, tenant: i % 3 })),
      );
      const stats = new RedisTaskAdmin(client);
      // While refused: every task is pending, held by the worker, or handled; none vanished.
      // stats() reads the pending lists, then the processing hashes: a task claimed between the two reads is in
      // neither. A lost task is missing from every read; one that moved shows in the next: the best of three.
      const accounted = async () => {
        const now = await stats.stats('acl.task');
        return now.pending.total + now.inFlight.total + keys.filter((key) => handled.has(key)).length;
      };
      for (let round = 0; round < 10; round++) {
        const best = Math.max(await accounted(), await accounted(), await accounted());
        expect(best).toBeGreaterThanOrEqual(keys.length);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      await admin.call('ACL', 'SETUSER', 'nolrem', '+lrem');
      await waitFor(() => keys.every((key) => handled.has(key)), 'every task once LREM is granted');
      await waitFor(async () => {
        const after = await stats.stats('acl.task');
        return after.pending.total === 0 && after.inFlight.total === 0 && after.deadLetters === 0;
      }, 'nothing left pending, in flight or dead');
    } finally {
      await module.close();
      await worker.app.close();
    }
  });
});

describe("the README's least-privilege rule, exactly as written", () => {
  it('runs every feature (plain, tracked, coalesced, batches, schedules, cancel, progress, send, the admin API, dashboard actions, metrics, health, the CLI, the reaper) as a user holding exactly aclRule(prefix), and Redis logs no refusal', async () => {
    const prefix = testPrefix('acl-tour');
    await admin.call('ACL', 'LOG', 'RESET');
    await admin.call('ACL', 'SETUSER', 'tour', 'on', '>pw-tour', ...aclRule(prefix).split(' '));
    const connection = `redis://tour:pw-tour@127.0.0.1:${server.port}`;
    const worker = await startWorker(prefix, [Everything], {
      connection,
      resultTtlMs: KEEP_MS,
      reaperIntervalMs: 100,
      backoff: { type: 'fixed', delayMs: 50 },
    });
    const module = await startOpsModule({ connection, prefix, enqueueTimeoutMs: 2_000 });
    const client = module.get(RedisTaskClient);
    const dashboard = new DashboardService(
      resolveSettings({ connection, prefix, actions: true }, { allowActionsWithoutGuard: true }),
    );
    try {
      const tasks = new RedisTaskAdmin(client);
      for (const feature of FEATURES) await feature.run(client, tasks, async () => undefined);
      // The admin API (what the CLI and the dashboard are made of).
      await firstValueFrom(client.emit('r.dead', new RedisTaskRecordBuilder({}).setMaxAttempts(1).build()));
      await waitFor(async () => (await tasks.stats('r.dead')).deadLetters === 1, 'a dead letter');
      expect(await tasks.queues()).toEqual(expect.arrayContaining(['r.plain', 'r.slow']));
      await tasks.workers('r.plain');
      await tasks.groups('r.plain');
      await tasks.clientWeights('r.plain');
      await tasks.setClientWeight('r.plain', 'tenant', 2);
      await tasks.setClientRateLimit('r.plain', 'tenant', 50);
      await tasks.pause('r.plain');
      await tasks.resume('r.plain');
      await tasks.clearFaults('r.plain');
      await tasks.countDeadLetters('r.dead');
      await tasks.listDeadLetters('r.dead');
      await tasks.requeueDeadLetters('r.dead', 'all');
      await waitFor(async () => (await tasks.stats('r.dead')).deadLetters === 1, 'the requeued dead letter back');
      await tasks.batchCounts();
      const open = client.batch({ id: 'open-one', onComplete: { pattern: 'r.done' }, keepMs: KEEP_MS });
      await open.add('r.slow', [{ n: 77 }]);
      await tasks.cancelBatch('open-one');
      await tasks.upsertSchedule('s1', { pattern: 'r.plain', cron: '0 3 * * *', payload: { n: 7_777 } });
      await tasks.pauseSchedule('s1');
      await tasks.resumeSchedule('s1');
      await tasks.triggerSchedule('s1');
      await tasks.listSchedules();
      // The dashboard: every page, and its actions.
      await dashboard.overview();
      await dashboard.pattern({ name: 'r.plain' });
      await dashboard.deadLetters({ name: 'r.dead' });
      await dashboard.pause({ name: 'r.plain' }, true);
      await dashboard.pause({ name: 'r.plain' }, false);
      await dashboard.schedules();
      await dashboard.scheduleAction({ id: 's1', action: 'trigger' });
      await dashboard.batch({ id: 'open-one' });
      await dashboard.requeue({ name: 'r.dead', all: true });
      await waitFor(async () => (await tasks.stats('r.dead')).deadLetters === 1, 'the dead letter back again');
      await dashboard.purge({ name: 'r.dead', all: true });
      await tasks.removeSchedule('s1');
      // Metrics and health.
      expect(await module.get(RedisTaskMetrics).registry.metrics()).toContain('redis_tasks_');
      const health = await module
        .get(HealthCheckService)
        .check([
          () =>
            module.get(RedisTaskHealthIndicator).isHealthy('tasks', { maxDeadLetterGrowth: 100, checkFaults: true }),
        ]);
      expect(health.status).toBe('ok');
      // The CLI.
      for (const args of [['stats'], ['dead', 'list', 'r.dead'], ['schedules', 'list']]) {
        const run = await cli([...args, '--prefix', prefix, '--json'], connection);
        expect({ args, code: run.code, stderr: run.stderr }).toEqual({ args, code: 0, stderr: '' });
      }
      // Reapers of the worker have swept meanwhile (reaperIntervalMs 100): SCAN, the audit, the folds.
      await new Promise((resolve) => setTimeout(resolve, 500));
    } finally {
      await dashboard.onModuleDestroy();
      await module.close();
      await worker.app.close();
    }
    // Nothing any of it sent was refused, not even in the background (a reaper's sweep, a metrics read).
    const refused = (await admin.call('ACL', 'LOG')) as unknown[][];
    expect(refused.map((entry) => JSON.stringify(entry))).toEqual([]);
  }, 120_000);

  it("grants nothing of a neighbouring prefix (aclRule('p') does not reach p:eu's keys or channels)", async () => {
    const prefix = testPrefix('acl-near');
    await admin.call('ACL', 'SETUSER', 'near', 'on', '>pw-near', ...aclRule(prefix).split(' '));
    const near = new Redis(`redis://near:pw-near@127.0.0.1:${server.port}`);
    try {
      await near.set(`${prefix}:{q}:ring`, 'x');
      await expect(near.set(`${prefix}:eu:{q}:ring`, 'x')).rejects.toThrow(/NOPERM/);
      await expect(near.del(`${prefix}:eu:queues`)).rejects.toThrow(/NOPERM/);
      await expect(near.publish(`${prefix}:eu:{q}:wake`, '')).rejects.toThrow(/NOPERM/);
      await expect(near.publish(`${prefix}:eu:replies:0123456789abcdef`, '')).rejects.toThrow(/NOPERM/);
      await near.publish(`${prefix}:replies:0123456789abcdef`, '');
    } finally {
      near.disconnect();
      await admin.del(`${prefix}:{q}:ring`);
    }
  });

  it('names the command a script was refused: a tracked emit without PEXPIRE fails with RedisPermissionError, not a raw reply', async () => {
    const prefix = testPrefix('acl-named');
    await admin.call('ACL', 'SETUSER', 'nopexpire', 'on', '>pw-np', ...aclRule(prefix).split(' '), '-pexpire');
    const { client, module } = await startProducer(prefix, {
      connection: `redis://nopexpire:pw-np@127.0.0.1:${server.port}`,
    });
    try {
      const error = await firstValueFrom(
        client.emit('acl.task', new RedisTaskRecordBuilder({ key: 'x' }).setTracked().build()),
      ).catch((caught: unknown) => caught);
      expect(error).toMatchObject({
        name: 'RedisPermissionError',
        code: 'REDIS_PERMISSION',
        command: 'pexpire',
        prefix,
      });
      expect(String((error as Error).message)).toMatch(/enqueueTasks.*pexpire/);
    } finally {
      await module.close();
    }
  });
});

/** Runs the built CLI (the global setup compiles lib/) against `url`. */
function cli(args: string[], url: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['.chaos-build/lib/cli/main.js', ...args],
      { env: { PATH: process.env.PATH, REDIS_URL: url } },
      (error, stdout, stderr) => {
        resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, stdout, stderr });
      },
    );
  });
}
