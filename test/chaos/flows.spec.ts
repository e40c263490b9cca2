import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from '@jest/globals';
import { Redis } from 'ioredis';
import { TaskAdmin } from '../../lib/core/admin/admin.js';
import { RedisTaskClient } from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { createFlows, describeStuck, planFlows, tally, wrongFlows } from './flow-load.js';
import { startRedisServer } from '../../scripts/redis-server.mjs';
import { testPrefix } from '../support/redis.js';
import { REAPER, type WorkerProcess, seededRandom, startWorkerProcess } from './processes.js';

const processes: WorkerProcess[] = [];

afterEach(async () => {
  await Promise.all(processes.splice(0).map((process) => process.kill('SIGKILL')));
});

describe('chaos: flows while workers and reapers are killed and Redis restarts from AOF', () => {
  it('ends each of 1,000 flows (diamonds, chains of 5, fan-out 50 / fan-in; failures under each policy) once, every node released at most once', async () => {
    const prefix = testPrefix('chaos-flows');
    const seed = Number(process.env.CHAOS_SEED) || Date.now() % 100_000;
    const next = seededRandom(seed);
    const dir = mkdtempSync(join(tmpdir(), 'tasks-flows-aof-'));
    const args = ['--appendonly', 'yes', '--appendfsync', 'always', '--dir', dir];
    let server = await startRedisServer(args);
    const direct = new Redis(server.url, { maxRetriesPerRequest: null });
    const client = new RedisTaskClient({ connection: server.url, prefix, shards: 3 });
    const env = {
      REDIS_URL: server.url,
      PREFIX: prefix,
      SHARDS: 3,
      CONCURRENCY: 16,
      LEASE_MS: 1_000,
      HEARTBEAT_MS: 200,
      REAPER_MS: 200,
      // A node killed mid-run twice still succeeds; one that fails does so every attempt.
      MAX_ATTEMPTS: 3,
      BACKOFF_MS: 20,
    };
    const runs = `${prefix}:runs`;
    const flows = planFlows(1_000, next);
    try {
      await client.connect();
      let nextId = 0;
      const spawn = async (kind: 'worker' | 'reaper') => {
        const process = await startWorkerProcess(`${kind}-${nextId++}`, env, kind === 'reaper' ? REAPER : undefined);
        processes.push(process);
        return process;
      };
      // Created first (as the batch chaos enqueues its load first): what the chaos hits is the run of the flows.
      await createFlows(client, flows);
      await Promise.all([spawn('worker'), spawn('worker'), spawn('worker'), spawn('reaper'), spawn('reaper')]);
      const ended = async () => Object.keys(tally(await direct.hgetall(`${runs}:flow-callbacks`)).runs).length;
      let kills = 0;
      let restarted = false;
      const deadline = Date.now() + 240_000;
      while ((await ended()) < flows.length) {
        if (Date.now() > deadline) {
          const endedIds = new Set(Object.keys(tally(await direct.hgetall(`${runs}:flow-callbacks`)).runs));
          const stuck = await describeStuck(TaskAdmin.onConnection(direct, prefix), flows, endedIds);
          const alive = processes.map((process) => process.id).join(', ');
          throw new Error(
            `seed ${seed}: only ${endedIds.size} of ${flows.length} flows ended (processes: ${alive})\n${stuck}`,
          );
        }
        await new Promise((resolve) => setTimeout(resolve, 700));
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
          await new Promise((resolve) => setTimeout(resolve, Number(process.env.CHAOS_OUTAGE_MS ?? 0)));
          server = await startRedisServer(args, server.port);
        }
      }
      // Anything released twice would show by now.
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      const [runLog, saw, callbackLog, summaries] = await Promise.all(
        ['flow-runs', 'flow-saw', 'flow-callbacks', 'flow-summaries'].map((name) => direct.hgetall(`${runs}:${name}`)),
      );
      const wrong = wrongFlows(flows, {
        ...tally(runLog),
        saw,
        callbackFirsts: tally(callbackLog).firsts,
        callbackRuns: tally(callbackLog).runs,
        summaries,
      });
      expect({ seed, wrong: wrong.slice(0, 20), count: wrong.length }).toEqual({ seed, wrong: [], count: 0 });
      expect(kills).toBeGreaterThanOrEqual(3);
      expect(restarted).toBe(true);
      const admin = TaskAdmin.onConnection(direct, prefix);
      // Every flow ended in its record too (0 stuck), its callback on record.
      const stuck: string[] = [];
      for (const flow of flows) {
        const status = await admin.getFlow(flow.id);
        if (!status.ended || status.callbackId === undefined) stuck.push(`${flow.id}: ${status.state}`);
      }
      expect(stuck).toEqual([]);
      const counts = await admin.flowCounts();
      const failed = flows.filter((flow) => flow.failing).length;
      // Each creation and end counted once: resends after the restart and folds again after kills count nothing.
      expect(counts).toEqual({ created: flows.length, succeeded: flows.length - failed, failed, cancelled: 0 });
      // Nothing left to do: the due index holds no flow whose work is not on record.
      const keys = new PrefixKeys(prefix);
      for (const id of await direct.zrange(keys.flowsDue, '0', '-1')) {
        expect(await direct.hget(keys.flow(id).record, 'callback')).toBe(`flow-complete.${id}`);
      }
      const nodes = flows.reduce((sum, flow) => sum + flow.nodes.length, 0);
      console.log(
        `flow chaos (seed ${seed}): ${flows.length} flows, ${nodes} nodes, ${failed} with a failing node; ${kills} processes killed, Redis restarted from AOF; every node released at most once, every flow ended once`,
      );
    } finally {
      await Promise.all(processes.splice(0).map((process) => process.kill('SIGKILL')));
      await client.close();
      direct.disconnect();
      await server.kill();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 300_000);
});
