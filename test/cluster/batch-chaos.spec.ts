import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { Cluster } from 'ioredis';
import { RedisTaskClient } from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { emitBatchLoad, wrongCallbacks } from '../chaos/batch-load.js';
import { createFlows, planFlows, tally, wrongFlows } from '../chaos/flow-load.js';
import { TaskAdmin } from '../../lib/core/admin/admin.js';
import { REAPER, startWorkerProcess, type WorkerProcess } from '../chaos/processes.js';
import { openRedis, testPrefix } from '../support/redis.js';
import { startCluster } from '../support/topology.js';

let cluster: Awaited<ReturnType<typeof startCluster>>;
/** The bookkeeping of the processes' handlers (runs, callbacks) lives on the test Redis, not the cluster. */
const book = openRedis();
const processes: WorkerProcess[] = [];

beforeAll(async () => {
  cluster = await startCluster(3, { aof: true });
}, 60_000);

afterEach(async () => {
  await Promise.all(processes.splice(0).map((process) => process.kill('SIGKILL')));
});

afterAll(async () => {
  await cluster?.stop();
  await book.quit();
});

describe('chaos on a Redis Cluster: batches while processes are killed and a primary restarts from AOF', () => {
  it('fires the callback of each of 100 batches (tasks sharded over 3 primaries, some failing) exactly once, with the right counts', async () => {
    const prefix = testPrefix('cluster-batches');
    const nodes = JSON.stringify(cluster.nodes);
    const client = new RedisTaskClient({ connection: { nodes: cluster.nodes }, prefix, shards: 3 });
    const env = {
      CLUSTER_NODES: nodes,
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
      const expected = await emitBatchLoad(
        client,
        100,
        // 2 to 24 tasks per pattern (about 3,900 in all, 20 ms each): the drain outlasts three kills.
        (b) => 2 + ((b * 7) % 23),
        (b, i) => (b + i) % 10 === 3,
      );
      let next = 0;
      const spawn = async (kind: 'worker' | 'reaper') => {
        const process = await startWorkerProcess(`${kind}-${next++}`, env, kind === 'reaper' ? REAPER : undefined);
        processes.push(process);
        return process;
      };
      await Promise.all([spawn('worker'), spawn('worker'), spawn('worker'), spawn('reaper')]);
      const callbacks = async () => Object.keys(await book.hgetall(`${runs}:callbacks`)).length;
      let kills = 0;
      let restarted = false;
      const deadline = Date.now() + 180_000;
      while ((await callbacks()) < 100) {
        if (Date.now() > deadline) throw new Error(`only ${await callbacks()} of 100 batches called back`);
        await new Promise((resolve) => setTimeout(resolve, 600));
        if (kills < 6) {
          const victim = processes.splice(kills % processes.length, 1)[0];
          await victim.kill('SIGKILL');
          kills++;
          await spawn(victim.id.startsWith('reaper') ? 'reaper' : 'worker');
        }
        if (!restarted && kills === 2) {
          // One primary crashes and comes back from its AOF (every write fsynced), mid-run.
          restarted = true;
          await cluster.restart(1);
        }
      }
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      const counts = {
        runs: await book.hgetall(`${runs}:callbacks`),
        firsts: await book.hgetall(`${runs}:callback-firsts`),
      };
      const summaries = await book.hgetall(`${runs}:summaries`);
      const wrong = wrongCallbacks(expected, counts, summaries);
      expect(wrong).toEqual([]);
      expect(restarted).toBe(true);
      expect(kills).toBeGreaterThanOrEqual(3);
      const direct = new Cluster(cluster.nodes);
      // A batch left in the due index (its enqueuer killed before it left it) has its callbacks on record:
      // the next check drops it.
      for (const id of await direct.zrange(new PrefixKeys(prefix).batchesDue, '0', '-1')) {
        expect(await direct.hget(new PrefixKeys(prefix).batch(id).record, 'callbacks')).toBe(`batch.${id}.complete`);
      }
      direct.disconnect();
    } finally {
      await Promise.all(processes.splice(0).map((process) => process.kill('SIGKILL')));
      await client.close();
      await book.del(runs, `${runs}:callbacks`, `${runs}:callback-firsts`, `${runs}:summaries`);
    }
  });
});

describe('chaos on a Redis Cluster: flows while processes are killed and a primary restarts from AOF', () => {
  it('ends each of 300 flows (nodes sharded over 3 primaries, failures under each policy) once, every node released at most once', async () => {
    const prefix = testPrefix('cluster-flows');
    const client = new RedisTaskClient({ connection: { nodes: cluster.nodes }, prefix, shards: 3 });
    const env = {
      CLUSTER_NODES: JSON.stringify(cluster.nodes),
      PREFIX: prefix,
      SHARDS: 3,
      CONCURRENCY: 16,
      LEASE_MS: 1_000,
      HEARTBEAT_MS: 200,
      REAPER_MS: 200,
      MAX_ATTEMPTS: 3,
      BACKOFF_MS: 20,
    };
    const runs = `${prefix}:runs`;
    let seed = 7;
    const flows = planFlows(300, () => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed / 2 ** 31;
    });
    try {
      await client.connect();
      let next = 0;
      const spawn = async (kind: 'worker' | 'reaper') => {
        const process = await startWorkerProcess(`${kind}-${next++}`, env, kind === 'reaper' ? REAPER : undefined);
        processes.push(process);
        return process;
      };
      // Created before the chaos (as the batches above): a primary restarting under a producer is the producer suite's.
      await createFlows(client, flows);
      await Promise.all([spawn('worker'), spawn('worker'), spawn('worker'), spawn('reaper')]);
      const ended = async () => Object.keys(tally(await book.hgetall(`${runs}:flow-callbacks`)).runs).length;
      // What a run that timed out says: the first flows that did not end, each node's state, and the processes' last words.
      const stuckReport = async () => {
        const over = new Set(Object.keys(tally(await book.hgetall(`${runs}:flow-callbacks`)).runs));
        const direct = new Cluster(cluster.nodes);
        try {
          const admin = TaskAdmin.onConnection(direct, prefix);
          const stuck = flows.filter((flow) => !over.has(flow.id)).slice(0, 5);
          const states = await Promise.all(
            stuck.map(async (flow) => {
              const status = await admin.getFlow(flow.id);
              const nodes = status.nodes.map((node) => `${node.id}:${node.state}`).join(' ');
              return `${flow.id} ${status.state} ended=${status.ended} callback=${status.callbackId ?? '-'} [${nodes}]`;
            }),
          );
          const output = processes.map((process) => `${process.id}: ${process.output.slice(-400)}`);
          return `stuck: ${states.join('; ')}\nprocesses:\n${output.join('\n')}`;
        } finally {
          direct.disconnect();
        }
      };
      let kills = 0;
      let restarted = false;
      const deadline = Date.now() + 180_000;
      while ((await ended()) < flows.length) {
        if (Date.now() > deadline) {
          throw new Error(`only ${await ended()} of ${flows.length} flows ended; ${await stuckReport()}`);
        }
        await new Promise((resolve) => setTimeout(resolve, 600));
        if (kills < 6) {
          const victim = processes.splice(kills % processes.length, 1)[0];
          await victim.kill('SIGKILL');
          kills++;
          await spawn(victim.id.startsWith('reaper') ? 'reaper' : 'worker');
        }
        if (!restarted && kills === 2) {
          // One primary crashes and comes back from its AOF (every write fsynced), mid-run.
          restarted = true;
          await cluster.restart(1);
        }
      }
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      const [runLog, saw, callbackLog, summaries] = await Promise.all(
        ['flow-runs', 'flow-saw', 'flow-callbacks', 'flow-summaries'].map((name) => book.hgetall(`${runs}:${name}`)),
      );
      const wrong = wrongFlows(flows, {
        ...tally(runLog),
        saw,
        callbackFirsts: tally(callbackLog).firsts,
        callbackRuns: tally(callbackLog).runs,
        summaries,
      });
      expect({ wrong: wrong.slice(0, 20), count: wrong.length }).toEqual({ wrong: [], count: 0 });
      expect(restarted).toBe(true);
      const direct = new Cluster(cluster.nodes);
      const admin = TaskAdmin.onConnection(direct, prefix);
      const failed = flows.filter((flow) => flow.failing).length;
      expect(await admin.flowCounts()).toEqual({ created: 300, succeeded: 300 - failed, failed, cancelled: 0 });
      direct.disconnect();
    } finally {
      await Promise.all(processes.splice(0).map((process) => process.kill('SIGKILL')));
      await client.close();
      await book.del(...['flow-runs', 'flow-saw', 'flow-callbacks', 'flow-summaries'].map((name) => `${runs}:${name}`));
    }
  }, 300_000);
});
