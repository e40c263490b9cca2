import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from '@jest/globals';
import { Redis } from 'ioredis';
import { TaskAdmin } from '../../lib/core/admin/admin.js';
import { RedisTaskClient } from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { emitBatchLoad, rerunsOf, wrongCallbacks } from './batch-load.js';
import { startRedisServer } from '../../scripts/redis-server.mjs';
import { testPrefix } from '../support/redis.js';
import { REAPER, type WorkerProcess, seededRandom, startWorkerProcess } from './processes.js';

const processes: WorkerProcess[] = [];

afterEach(async () => {
  await Promise.all(processes.splice(0).map((process) => process.kill('SIGKILL')));
});

describe('chaos: batches while workers and reapers are killed and Redis restarts from AOF', () => {
  it('fires the callback of each of 200 batches (3–51 tasks over 3 sharded patterns, some failing) exactly once, with the right counts', async () => {
    const prefix = testPrefix('chaos-batches');
    const seed = Date.now() % 100_000;
    const next = seededRandom(seed);
    const dir = mkdtempSync(join(tmpdir(), 'tasks-batches-aof-'));
    const args = ['--appendonly', 'yes', '--appendfsync', 'always', '--dir', dir];
    let server = await startRedisServer(args);
    const direct = new Redis(server.url, { maxRetriesPerRequest: null });
    const client = new RedisTaskClient({ connection: server.url, prefix, shards: 3 });
    const env = {
      REDIS_URL: server.url,
      PREFIX: prefix,
      SHARDS: 3,
      CONCURRENCY: 8,
      LEASE_MS: 1_000,
      HEARTBEAT_MS: 200,
      REAPER_MS: 200,
      MAX_ATTEMPTS: 2,
      BACKOFF_MS: 50,
    };
    const runs = `${prefix}:runs`;
    try {
      await client.connect();
      // 200 batches of 3 to 51 tasks over three patterns, a tenth of the tasks failing every attempt.
      const expected = await emitBatchLoad(
        client,
        200,
        () => 1 + Math.floor(next() * 17),
        () => next() < 0.1,
      );
      let nextId = 0;
      const spawn = async (kind: 'worker' | 'reaper') => {
        const process = await startWorkerProcess(`${kind}-${nextId++}`, env, kind === 'reaper' ? REAPER : undefined);
        processes.push(process);
        return process;
      };
      await Promise.all([spawn('worker'), spawn('worker'), spawn('worker'), spawn('reaper'), spawn('reaper')]);
      const callbacks = async () => Object.keys(await direct.hgetall(`${runs}:callbacks`).catch(() => ({}))).length;
      let kills = 0;
      let restarted = false;
      const deadline = Date.now() + 180_000;
      while ((await callbacks()) < 200) {
        if (Date.now() > deadline)
          throw new Error(`seed ${seed}: only ${await callbacks()} of 200 batches called back`);
        await new Promise((resolve) => setTimeout(resolve, 600));
        if (kills < 8) {
          const victim = processes.splice(Math.floor(next() * processes.length), 1)[0];
          await victim.kill('SIGKILL');
          kills++;
          await spawn(victim.id.startsWith('reaper') ? 'reaper' : 'worker');
        }
        if (!restarted && kills === 3) {
          // Redis crashes and comes back from its AOF (every write fsynced), mid-run.
          restarted = true;
          await server.kill();
          server = await startRedisServer(args, server.port);
        }
      }
      // Every batch called back exactly once, after all its tasks settled, with the right counts.
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      const counts = {
        runs: await direct.hgetall(`${runs}:callbacks`),
        firsts: await direct.hgetall(`${runs}:callback-firsts`),
      };
      const summaries = await direct.hgetall(`${runs}:summaries`);
      const wrong = wrongCallbacks(expected, counts, summaries);
      expect({ seed, wrong }).toEqual({ seed, wrong: [] });
      expect(kills).toBeGreaterThanOrEqual(3);
      expect(restarted).toBe(true);
      const admin = TaskAdmin.onConnection(direct, prefix);
      expect(await admin.getBatch('b7')).toMatchObject({ state: 'sealed', pending: 0, callback: 'enqueued' });
      // A batch left in the due index (its enqueuer killed before it left it) has its callbacks on record:
      // the next check drops it.
      for (const id of await direct.zrange(new PrefixKeys(prefix).batchesDue, '0', '-1')) {
        expect(await direct.hget(new PrefixKeys(prefix).batch(id).record, 'callbacks')).toBe(`batch.${id}.complete`);
      }
      console.log(
        `batch chaos (seed ${seed}): 200 batches, ${[...expected.values()].reduce((sum, batch) => sum + batch.total, 0)} tasks; ${kills} processes killed, Redis restarted from AOF; every callback task once (${rerunsOf(counts)} run again after a kill mid-run)`,
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
