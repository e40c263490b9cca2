import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from '@jest/globals';
import { Redis } from 'ioredis';
import { RedisTaskClient, RedisTaskRecordBuilder } from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { startRedisServer } from '../../scripts/redis-server.mjs';
import { keysUnder, testPrefix } from '../support/redis.js';
import { type WorkerProcess, seededRandom, startWorkerProcess } from './processes.js';

const processes: WorkerProcess[] = [];

afterEach(async () => {
  await Promise.all(processes.splice(0).map((process) => process.kill('SIGKILL')));
});

const TASKS = 200;
const STEPS = 100;

/** What happened to the workers, as the test did it: who was killed, who was frozen and when. */
interface Happenings {
  readonly killed: Set<string>;
  readonly frozen: Map<string, { from: number; to: number }>;
}

/**
 * Every step's story, checked against what the test did to the workers: each step's function succeeded once,
 * or again only after a success that was never saved (its worker killed, its run refused the save as no longer
 * holding the task, or Redis gone at the save); every saved result is a run's that held the task when it saved
 * (never one frozen past its lease, thawed, and finishing the step after its task was taken over).
 */
function wrongSteps(
  tasks: readonly string[],
  log: { done: Record<string, string>; runs: Record<string, string>; unsaved: Record<string, string> },
  happened: Happenings,
): string[] {
  const wrong: string[] = [];
  const successes = new Map<string, { run: string; worker: string; startedAt: number; doneAt: number }[]>();
  for (const [field, value] of Object.entries(log.runs)) {
    const [name, run] = field.split('|');
    const [worker, startedAt, doneAt] = value.split('|');
    const list = successes.get(name) ?? [];
    list.push({ run, worker, startedAt: Number(startedAt), doneAt: Number(doneAt) });
    successes.set(name, list);
  }
  for (const task of tasks) {
    const results = JSON.parse(log.done[task] ?? 'null') as string[] | null;
    if (!results || results.length !== STEPS) {
      wrong.push(`${task}: did not end with ${STEPS} steps`);
      continue;
    }
    for (let i = 0; i < STEPS; i++) {
      const name = `${task}/s${i}`;
      const runs = successes.get(name) ?? [];
      const saved = runs.find((run) => run.run === results[i]);
      if (!saved) {
        wrong.push(`${name}: its result names run ${results[i]}, which never succeeded`);
        continue;
      }
      for (const other of runs) {
        if (other === saved || log.unsaved[`${name}|${other.run}`] !== undefined) continue;
        // A run frozen past its lease and thawed: its task was taken over meanwhile, so a step it finished after
        // the thaw must have been refused its save (it lives 300 ms more, time enough to say so).
        const freeze = happened.frozen.get(other.worker);
        if (freeze && other.startedAt < freeze.from && other.doneAt > freeze.to) {
          wrong.push(
            `${name}: run ${other.run} of ${other.worker} lost its task while frozen, yet its save was not refused`,
          );
        } else if (!happened.killed.has(other.worker)) {
          wrong.push(
            `${name}: ran again after run ${other.run} of ${other.worker} succeeded (not killed, save not refused)`,
          );
        }
      }
      const freeze = happened.frozen.get(saved.worker);
      if (freeze && saved.startedAt < freeze.from && saved.doneAt > freeze.to) {
        wrong.push(`${name}: saved by run ${saved.run}, frozen past its lease and thawed (its task was taken over)`);
      }
    }
  }
  return wrong;
}

describe('chaos: durable steps while workers are killed, deployed and frozen, and Redis restarts from AOF', () => {
  it('runs every step of 200 tasks of 100 steps once per success (1% failing once), ends every task, saves nothing from a run that lost its task', async () => {
    const prefix = testPrefix('chaos-steps');
    const seed = Date.now() % 100_000;
    const next = seededRandom(seed);
    const dir = mkdtempSync(join(tmpdir(), 'tasks-steps-aof-'));
    const args = ['--appendonly', 'yes', '--appendfsync', 'always', '--dir', dir];
    let server = await startRedisServer(args);
    const direct = new Redis(server.url, { maxRetriesPerRequest: null });
    const client = new RedisTaskClient({ connection: server.url, prefix });
    const env = {
      REDIS_URL: server.url,
      PREFIX: prefix,
      CONCURRENCY: 8,
      LEASE_MS: 1_000,
      HEARTBEAT_MS: 200,
      REAPER_MS: 200,
      SHUTDOWN_MS: 2_000,
      // A kill -9 counts an attempt of each task its worker held (a task that kills its worker must end): with a
      // kill every half second, a task may be hit many times. Step failures do not count (their own attempts).
      MAX_ATTEMPTS: 1_000,
      BACKOFF_MS: 20,
    };
    const runs = `${prefix}:runs`;
    const happened: Happenings = { killed: new Set(), frozen: new Map() };
    const tasks = Array.from({ length: TASKS }, (_, t) => `task-${t}`);
    try {
      await client.connect();
      let nextId = 0;
      const spawn = async () => {
        const process = await startWorkerProcess(`worker-${nextId++}`, env);
        processes.push(process);
        return process;
      };
      let failing = 0;
      await client.emitBatch(
        'chaos.steps',
        tasks.map((key) => {
          // 1% of the steps fail once.
          const steps = Array.from({ length: STEPS }, (_, i) => i).filter(() => next() < 0.01);
          failing += steps.length;
          return new RedisTaskRecordBuilder({ key, steps: STEPS, failing: steps, stepMs: 10 }).setId(key).build();
        }),
      );
      await Promise.all([spawn(), spawn(), spawn()]);
      const ended = async () => direct.hlen(`${runs}:steps-done`);
      let kills = 0;
      let deploys = 0;
      let freezes = 0;
      let restarted = false;
      const deadline = Date.now() + 240_000;
      // Until every task ended, and at least through tick 7 (each kind of fault made, below, whatever the speed).
      for (let tick = 1; tick <= 7 || (await ended()) < TASKS; tick++) {
        if (Date.now() > deadline) throw new Error(`seed ${seed}: only ${await ended()} of ${TASKS} tasks ended`);
        await new Promise((resolve) => setTimeout(resolve, 500));
        const victim = processes.splice(Math.floor(next() * processes.length), 1)[0];
        // Every kind of fault by tick 7: kills at 1, 2 and 5, deploys at 4 and 6 (a run whose tasks ended at tick 7
        // once had one deploy only), freezes at 3 and 7.
        if (tick % 4 === 0 || tick === 6) {
          // A deploy: SIGTERM, then the next worker (the stopped one gives its tasks back at a step boundary).
          await victim.kill('SIGTERM');
          deploys++;
        } else if (tick === 3 || tick === 7) {
          // A process frozen past its lease (a long GC pause, a stopped VM): its tasks are taken over meanwhile;
          // thawed, its runs go on and must save nothing. Then it is killed (its runs told or not, it goes).
          const from = Date.now();
          victim.child.kill('SIGSTOP');
          await new Promise((resolve) => setTimeout(resolve, 2_500));
          const to = Date.now();
          victim.child.kill('SIGCONT');
          happened.frozen.set(victim.id, { from, to });
          freezes++;
          await new Promise((resolve) => setTimeout(resolve, 300));
          await victim.kill('SIGKILL');
          happened.killed.add(victim.id);
        } else {
          await victim.kill('SIGKILL');
          happened.killed.add(victim.id);
          kills++;
        }
        await spawn();
        if (!restarted && tick === 5) {
          // Redis crashes and comes back from its AOF (every write fsynced), mid-run.
          restarted = true;
          await server.kill();
          server = await startRedisServer(args, server.port);
        }
      }
      const [done, runLog, unsaved] = await Promise.all(
        ['steps-done', 'step-runs', 'step-unsaved'].map((name) => direct.hgetall(`${runs}:${name}`)),
      );
      const wrong = wrongSteps(tasks, { done, runs: runLog, unsaved }, happened);
      expect({ seed, wrong: wrong.slice(0, 20), count: wrong.length }).toEqual({ seed, wrong: [], count: 0 });
      // Every step's side effect applied (idempotently, under its step key), every step that fails once failed once.
      expect(await direct.scard(`${runs}:step-effects`)).toBe(TASKS * STEPS);
      expect(await direct.scard(`${runs}:step-failed`)).toBe(failing);
      expect({ kills, deploys, freezes, restarted }).toMatchObject({ restarted: true, freezes: 2 });
      expect(kills).toBeGreaterThanOrEqual(3);
      expect(deploys).toBeGreaterThanOrEqual(2);
      // The frozen runs were refused their saves (the fence was exercised, not only passed).
      const refused = Object.values(unsaved).filter((why) => why === 'LeaseLostError').length;
      expect(refused).toBeGreaterThan(0);
      // Every task ended, so every steps key went with it.
      const stepsLeft = (await keysUnder(direct, prefix)).filter((key) => key.includes(':steps:'));
      expect(stepsLeft).toEqual([]);
      const queue = new PrefixKeys(prefix).queue('chaos.steps');
      const counters = await direct.hgetall(queue.counters);
      const reruns = Object.keys(runLog).length - TASKS * STEPS;
      console.log(
        `steps chaos (seed ${seed}): ${TASKS} tasks x ${STEPS} steps, ${failing} failing once; ${kills} kill -9, ${deploys} deploys (${counters.yielded ?? 0} yields), ${freezes} freezes (${refused} saves refused), Redis restarted from AOF; ${reruns} step function(s) ran again after an unsaved success, each explained`,
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
