import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from '@jest/globals';
import { Redis } from 'ioredis';
import { TaskAdmin } from '../../lib/core/admin/admin.js';
import { PrefixKeys, RedisTaskClient, RedisTaskRecordBuilder, type BatchSummary } from '../../lib/index.js';
import { startRedisServer } from '../../scripts/redis-server.mjs';
import { testPrefix } from '../support/redis.js';
import { REAPER, startWorkerProcess, type WorkerProcess } from './processes.js';

const processes: WorkerProcess[] = [];

afterEach(async () => {
  await Promise.all(processes.splice(0).map((process) => process.kill('SIGKILL')));
});

/** A small deterministic generator (the run is reproducible from its seed, printed on failure). */
function random(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state * 1_103_515_245 + 12_345) % 2 ** 31;
    return state / 2 ** 31;
  };
}

describe('chaos: batches while workers and reapers are killed and Redis restarts from AOF', () => {
  it('fires the callback of each of 200 batches (1–50 tasks over 3 sharded patterns, some failing) exactly once, with the right counts', async () => {
    const prefix = testPrefix('chaos-batches');
    const seed = Date.now() % 100_000;
    const next = random(seed);
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
      // 200 batches of 1 to 50 tasks over three patterns, a tenth of the tasks failing every attempt.
      const expected = new Map<string, { total: number; failed: number }>();
      for (let b = 0; b < 200; b++) {
        const id = `b${b}`;
        const size = 1 + Math.floor(next() * 50);
        const batch = client.batch({ id, onComplete: { pattern: 'chaos.batch.done' } });
        let failed = 0;
        for (const pattern of ['chaos.batch.a', 'chaos.batch.b', 'chaos.batch.c']) {
          const share = Math.ceil(size / 3);
          const items = Array.from({ length: share }, (_, i) => {
            const fail = next() < 0.1;
            if (fail) failed++;
            return new RedisTaskRecordBuilder({ key: `${id}.${pattern}.${i}`, workMs: 20, ...(fail ? { fail } : {}) })
              .setClientId(`client-${i % 4}`)
              .build();
          });
          await batch.add(pattern, items);
        }
        await batch.seal();
        expected.set(id, { total: 3 * Math.ceil(size / 3), failed });
      }
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
      const counts = await direct.hgetall(`${runs}:callbacks`);
      const summaries = await direct.hgetall(`${runs}:summaries`);
      const wrong: string[] = [];
      for (const [id, { total, failed }] of expected) {
        const summary = JSON.parse(summaries[id] ?? '{}') as BatchSummary;
        if (counts[id] !== '1') wrong.push(`${id}: ${counts[id] ?? 0} callbacks`);
        if (summary.total !== total || summary.failed !== failed || summary.succeeded !== total - failed) {
          wrong.push(
            `${id}: ${JSON.stringify({ ...summary, failedIds: summary.failedIds?.length })} expected ${JSON.stringify({ total, failed })}`,
          );
        }
      }
      expect({ seed, wrong }).toEqual({ seed, wrong: [] });
      expect(kills).toBeGreaterThanOrEqual(3);
      expect(restarted).toBe(true);
      const admin = TaskAdmin.onConnection(direct, prefix);
      expect(await admin.getBatch('b7')).toMatchObject({ state: 'sealed', pending: 0, callback: 'enqueued' });
      expect(await direct.zcard(new PrefixKeys(prefix).batchesDue)).toBe(0);
      console.log(
        `batch chaos (seed ${seed}): 200 batches, ${[...expected.values()].reduce((sum, batch) => sum + batch.total, 0)} tasks; ${kills} processes killed, Redis restarted from AOF; every callback once`,
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
