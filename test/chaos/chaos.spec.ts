import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller, type INestMicroservice } from '@nestjs/common';
import { Ctx, EventPattern, Payload } from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import { Redis } from 'ioredis';
import type { DeadLetterRecord } from '../../lib/core/model/dead-letter.js';
import type { TaskOutcomeEvent } from '../../lib/core/model/outcomes.js';
import {
  RedisTaskClient,
  RedisTaskContext,
  RedisTaskModule,
  RedisTaskRecordBuilder,
  RedisTaskTransport,
} from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { startRedisServer } from '../../scripts/redis-server.mjs';
import { deleteKeys, keysUnder, openRedis, testPrefix, waitFor } from '../support/redis.js';
import { startWorkerProcess, type WorkerProcess } from './processes.js';

const redis = openRedis();
const processes: WorkerProcess[] = [];
let prefix = '';

afterEach(async () => {
  await Promise.all(processes.splice(0).map((worker) => worker.kill('SIGKILL')));
  await deleteKeys(redis, prefix);
  await redis.del(`${prefix}:runs`, `${prefix}:queues`);
});

afterAll(async () => {
  await redis.quit();
});

async function producer(connection: string, name = prefix) {
  const module = await Test.createTestingModule({
    imports: [RedisTaskModule.forRoot({ connection, prefix: name, reaperIntervalMs: false })],
  }).compile();
  module.useLogger(false);
  await module.init();
  return { client: module.get(RedisTaskClient), close: () => module.close() };
}

/** Keys that hold tasks: pending lists, priority sets, the ring, processing hashes, the delayed set, dead letters. */
async function taskKeys(): Promise<string[]> {
  return (await keysUnder(redis, prefix)).filter((key) =>
    /:(pending|priority|processing):|:(ring|delayed|dead)$/.test(key),
  );
}

describe('chaos: worker processes killed with SIGKILL', () => {
  // Prefetch claims several tasks per round trip, each under its own fencing token: killing a worker
  // that holds a prefetched batch must lose none of them and repeat only those it held.
  it.each([
    { total: 20_000, concurrency: 8, prefetch: 1, clientCap: 0 },
    // Twice the tasks: at 16 × 16 the drain takes under two seconds, too short for three kills on a quiet machine.
    { total: 40_000, concurrency: 16, prefetch: 16, clientCap: 0 },
    { total: 10_000, concurrency: 16, prefetch: 16, clientCap: 2 },
  ])(
    'completes $total tasks from 4 clients (a fifth of them prioritized, a seventh tracked) with prefetch $prefetch and client cap $clientCap while a worker is killed and replaced every ~0.5 s',
    async ({ total, concurrency, prefetch, clientCap }) => {
      prefix = testPrefix(`kill9-p${prefetch}-c${clientCap}`);
      const env = {
        PREFIX: prefix,
        CONCURRENCY: concurrency,
        PREFETCH: prefetch,
        CLIENT_CONCURRENCY: clientCap,
        LEASE_MS: 3_000,
        HEARTBEAT_MS: 250,
        REAPER_MS: 200,
      };
      const { client, close } = await producer(process.env.REDIS_URL as string);
      const tracked: string[] = [];
      for (let start = 0; start < total; start += 2_000) {
        const receipts = await client.emitBatch(
          'chaos.task',
          Array.from({ length: 2_000 }, (_, i) =>
            new RedisTaskRecordBuilder({ key: `t${start + i}`, workMs: 10 })
              .setClientId(`client-${(start + i) % 4}`)
              .setPriority((start + i) % 5 === 0 ? 1 + ((start + i) % 3) : 0)
              .setTracked((start + i) % 7 === 3)
              .build(),
          ),
        );
        receipts.forEach((receipt, i) => (start + i) % 7 === 3 && tracked.push(receipt.id));
      }
      await close();
      let next = 0;
      const spawn = async () => {
        const worker = await startWorkerProcess(`chaos-${next++}`, env);
        processes.push(worker);
        return worker;
      };
      await Promise.all([spawn(), spawn(), spawn(), spawn()]);

      const queue = new PrefixKeys(prefix).queue('chaos.task');
      const runsKey = `${prefix}:runs`;
      let kills = 0;
      let inFlightAtKills = 0;
      const deadline = Date.now() + 240_000;
      while ((await redis.hlen(runsKey)) < total || (await taskKeys()).length > 0) {
        if (Date.now() > deadline) {
          throw new Error(
            `not done: ${await redis.hlen(runsKey)} of ${total} tasks ran; task keys left: ${(await taskKeys()).join(', ')}`,
          );
        }
        await new Promise((resolve) => setTimeout(resolve, 500));
        if ((await redis.hlen(runsKey)) < total) {
          const victim = processes.splice(Math.floor(Math.random() * processes.length), 1)[0];
          await victim.kill('SIGKILL');
          kills++;
          // What it held at death is exactly what may run twice.
          inFlightAtKills += await redis.hlen(queue.processing(victim.id));
          await spawn();
        }
      }
      const runs = Object.values(await redis.hgetall(runsKey)).map(Number);
      const repeats = runs.reduce((sum, count) => sum + count, 0) - total;
      console.log(
        `kill -9 chaos, prefetch ${prefetch}, client cap ${clientCap}: ${kills} workers killed holding ${inFlightAtKills} tasks; ${repeats} handler runs were repeats (at-least-once)`,
      );
      expect(kills).toBeGreaterThanOrEqual(3);
      expect(runs).toHaveLength(total);
      expect(runs.every((count) => count >= 1)).toBe(true);
      expect(repeats).toBeLessThanOrEqual(inFlightAtKills);
      expect(await taskKeys()).toEqual([]);
      // The cap's bookkeeping (in-flight counts, counted tokens, parked clients) is empty again.
      expect(await redis.exists(queue.inflight, queue.counted, queue.parked)).toBe(0);
      // Every tracked task's index followed it through the kills: completed, its waiting entry gone.
      const states = await Promise.all(tracked.map((id) => redis.hget(queue.task(id), 'state')));
      expect(states.filter((state) => state !== 'completed')).toEqual([]);
      expect((await keysUnder(redis, prefix)).filter((key) => key.includes(':task-entry:'))).toEqual([]);
    },
  );
});

describe('chaos: latest wins (coalescing keys) with workers killed', () => {
  it('runs the newest payload of each of 40 keys (replace, debounce, keep-last, supersede) last, and loses none, while a worker is killed and replaced every ~0.5 s', async () => {
    prefix = testPrefix('kill9-latest');
    const env = { PREFIX: prefix, CONCURRENCY: 8, PREFETCH: 4, LEASE_MS: 2_000, HEARTBEAT_MS: 200, REAPER_MS: 200 };
    const modes = ['replace', 'debounce', 'keep-last', 'supersede'] as const;
    const keys = Array.from({ length: 40 }, (_, k) => ({ key: `k${k}`, mode: modes[k % 4] }));
    const rounds = 60;
    let next = 0;
    const spawn = async () => {
      const worker = await startWorkerProcess(`latest-${next++}`, env);
      processes.push(worker);
      return worker;
    };
    await Promise.all([spawn(), spawn(), spawn()]);
    const { client, close } = await producer(process.env.REDIS_URL as string);
    let emitted = 0;
    const emitting = (async () => {
      for (let seq = 1; seq <= rounds; seq++) {
        await client.emitBatch(
          'chaos.latest',
          keys.map(({ key, mode }) =>
            new RedisTaskRecordBuilder({ key, seq, workMs: 40 })
              .setClientId(`client-${seq % 3}`)
              .setCoalesceKey(key, mode === 'debounce' ? { mode, delayMs: 50, maxWaitMs: 300 } : { mode })
              .build(),
          ),
        );
        emitted = seq;
        await new Promise((resolve) => setTimeout(resolve, 60));
      }
    })();
    const runsKey = `${prefix}:runs`;
    const finished = async () => Object.values(await redis.hgetall(`${runsKey}:finished`)).map(Number);
    const settled = async () =>
      emitted === rounds &&
      (await finished()).filter((seq) => seq === rounds).length === keys.length &&
      (await taskKeys()).length === 0 &&
      (await keysUnder(redis, prefix)).every((key) => !key.includes(':coalesce:'));
    let kills = 0;
    const deadline = Date.now() + 120_000;
    // Three kills at least, even when the load settles sooner on a fast run (a kill after it settled is one
    // more worker death its keys must survive).
    while (kills < 3 || !(await settled())) {
      if (Date.now() > deadline) {
        throw new Error(`not done: ${emitted} rounds emitted; finished ${JSON.stringify(await finished())}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 500));
      if (emitted < rounds || kills < 3) {
        const victim = processes.splice(Math.floor(Math.random() * processes.length), 1)[0];
        await victim.kill('SIGKILL');
        kills++;
        await spawn();
      }
    }
    await emitting;
    await close();
    const queue = new PrefixKeys(prefix).queue('chaos.latest');
    let runs = 0;
    for (const { key, mode } of keys) {
      const starts = (await redis.lrange(`${runsKey}:starts:${key}`, 0, -1)).map(Number);
      runs += starts.length;
      // Once the newest payload started, nothing older ran.
      expect(starts.slice(starts.indexOf(rounds)).every((seq) => seq === rounds)).toBe(true);
      // One at a time (keep-last): runs start in payload order.
      if (mode === 'keep-last') expect([...starts].sort((a, b) => a - b)).toEqual(starts);
    }
    const counters = await redis.hgetall(queue.counters);
    console.log(
      `kill -9 latest wins: ${kills} workers killed; ${rounds * keys.length} emits over ${keys.length} keys ran ${runs} times; counters ${JSON.stringify(counters)}`,
    );
    expect(kills).toBeGreaterThanOrEqual(3);
    expect(Number(counters.replaced)).toBeGreaterThan(0);
    // Every emit ended exactly once: completed (acknowledged, fenced), or replaced by a newer one of its key.
    expect(Number(counters.completed) + Number(counters.replaced)).toBe(rounds * keys.length);
    expect(runs).toBeLessThan(rounds * keys.length);
    await redis.del(`${runsKey}:finished`, ...keys.map(({ key }) => `${runsKey}:starts:${key}`));
  });
});

describe('chaos: consumer groups with a worker of each group killed', () => {
  it('runs every one of 5,000 tasks from 3 clients at least once in each of two groups while a worker of each is killed with SIGKILL', async () => {
    prefix = testPrefix('groups-kill9');
    const total = 5_000;
    const groups = ['billing', 'email'];
    const spawn = async (group: string, n: number) => {
      const worker = await startWorkerProcess(`${group}-${n}`, {
        PREFIX: prefix,
        GROUP: group,
        CONCURRENCY: 8,
        LEASE_MS: 2_000,
        HEARTBEAT_MS: 250,
        REAPER_MS: 200,
      });
      processes.push(worker);
      return worker;
    };
    for (const group of groups) await Promise.all([spawn(group, 0), spawn(group, 1)]);
    // Both groups registered before anything is emitted: each gets a copy of every task.
    const queue = new PrefixKeys(prefix).queue('chaos.task');
    expect((await redis.smembers(queue.groups)).sort()).toEqual(groups);
    const { client, close } = await producer(process.env.REDIS_URL as string);
    for (let start = 0; start < total; start += 1_000) {
      await client.emitBatch(
        'chaos.task',
        Array.from({ length: 1_000 }, (_, i) =>
          new RedisTaskRecordBuilder({ key: `t${start + i}`, workMs: 5 })
            .setClientId(`client-${(start + i) % 3}`)
            .build(),
        ),
      );
    }
    await close();
    const runs = (group: string) => redis.hlen(`${prefix}:runs:${group}`);
    await waitFor(async () => (await runs('billing')) > 500 && (await runs('email')) > 500, 'both groups under way', {
      timeoutMs: 30_000,
    });
    let held = 0;
    for (const group of groups) {
      const victim = processes.find((worker) => worker.id === `${group}-0`)!;
      await victim.kill('SIGKILL');
      held += await redis.hlen(queue.forGroup(group).processing(victim.id));
      processes.splice(processes.indexOf(victim), 1);
      await spawn(group, 2);
    }
    await waitFor(
      async () => (await runs('billing')) === total && (await runs('email')) === total,
      'every task in both groups',
      { timeoutMs: 120_000, intervalMs: 200 },
    );
    for (const group of groups) {
      const counts = Object.values(await redis.hgetall(`${prefix}:runs:${group}`)).map(Number);
      expect(counts.every((count) => count >= 1)).toBe(true);
      expect(counts.reduce((sum, count) => sum + count, 0) - total).toBeLessThanOrEqual(held);
    }
    await redis.del(...groups.map((group) => `${prefix}:runs:${group}`));
  });
});

describe('chaos: a handler that hangs past its lease', () => {
  it("is recovered and completed by another worker, and the hung worker's late ack is refused", async () => {
    prefix = testPrefix('hang');
    const env = { PREFIX: prefix, CONCURRENCY: 2, LEASE_MS: 1_000, HEARTBEAT_MS: 200, REAPER_MS: 100 };
    processes.push(await startWorkerProcess('hang-a', env), await startWorkerProcess('hang-b', env));
    const { client, close } = await producer(process.env.REDIS_URL as string);
    await client.emitBatch('chaos.hang', [{ key: 'stuck', hangMs: 5_000 }]);
    await close();

    await waitFor(
      async () => Number(await redis.hget(`${prefix}:runs`, 'stuck')) === 2,
      'the second run by the other worker',
      { timeoutMs: 20_000 },
    );
    const hung = processes.find((worker) => worker.output.includes('HANGING')) as WorkerProcess;
    const other = processes.find((worker) => worker !== hung) as WorkerProcess;
    expect(other.output).not.toContain('HANGING');
    await hung.waitFor('is no longer held by this worker (lease lost)', 20_000);
    expect(hung.output).toContain('UNBLOCKED');
    await waitFor(async () => (await taskKeys()).length === 0, 'no task left in Redis');
    expect(Number(await redis.hget(`${prefix}:runs`, 'stuck'))).toBe(2);
  });
});

describe('chaos: deploys (SIGTERM with enableShutdownHooks, restart with the same worker id)', () => {
  it('runs no finished task again over 12 SIGTERM-and-restart trials while tasks flow (concurrency 1 and 16)', async () => {
    prefix = testPrefix('deploy-term');
    const { client, close } = await producer(process.env.REDIS_URL as string);
    const total = 3_000;
    // Every other task tracked: a deploy returns them to their queue, and their index follows. A quarter
    // have a coalescing key of their own: a deploy returns them as their key's waiting task.
    const receipts = await client.emitBatch(
      'chaos.task',
      Array.from({ length: total }, (_, i) => {
        const record = new RedisTaskRecordBuilder({ key: `d${i}`, workMs: 2 }).setTracked(i % 2 === 0);
        return (i % 4 === 1 ? record.setCoalesceKey(`d${i}`) : record).build();
      }),
    );
    await close();
    const runsKey = `${prefix}:runs`;
    for (let trial = 0; trial < 12; trial++) {
      const worker = await startWorkerProcess('deploy-term', {
        PREFIX: prefix,
        CONCURRENCY: trial % 2 === 0 ? 1 : 16,
        SHUTDOWN_MS: 5_000,
        HEARTBEAT_MS: 100,
        LEASE_MS: 2_000,
      });
      processes.push(worker);
      const before = await redis.hlen(runsKey);
      await waitFor(
        async () => (await redis.hlen(runsKey)) >= Math.min(total, before + 40 + trial * 7),
        'tasks flowing',
      );
      await worker.kill('SIGTERM');
      expect(worker.output).not.toContain('its outcome was discarded');
    }
    const last = await startWorkerProcess('deploy-term', {
      PREFIX: prefix,
      CONCURRENCY: 16,
      HEARTBEAT_MS: 100,
      LEASE_MS: 2_000,
    });
    processes.push(last);
    await waitFor(
      async () => (await redis.hlen(runsKey)) === total && (await taskKeys()).length === 0,
      'every task run and settled',
      { timeoutMs: 60_000, intervalMs: 100 },
    );
    const runs = Object.values(await redis.hgetall(runsKey)).map(Number);
    expect(runs.filter((count) => count > 1)).toEqual([]);
    const queue = new PrefixKeys(prefix).queue('chaos.task');
    const states = await Promise.all(
      receipts.filter((_, i) => i % 2 === 0).map((receipt) => redis.hget(queue.task(receipt.id), 'state')),
    );
    expect(states.filter((state) => state !== 'completed')).toEqual([]);
  });
});

describe('chaos: graceful shutdown on SIGTERM', () => {
  it('returns running tasks to the head of their list without counting an attempt, and leaves nothing held', async () => {
    prefix = testPrefix('sigterm');
    const worker = await startWorkerProcess('term-1', { PREFIX: prefix, CONCURRENCY: 2, SHUTDOWN_MS: 300 });
    processes.push(worker);
    const { client, close } = await producer(process.env.REDIS_URL as string);
    await client.emitBatch('chaos.slow', [{ key: 'a' }, { key: 'b' }, { key: 'c' }]);
    await close();
    const queue = new PrefixKeys(prefix).queue('chaos.slow');
    await waitFor(async () => (await redis.hlen(queue.processing('term-1'))) === 2, 'two tasks running');

    await worker.kill('SIGTERM');
    // Nest's shutdown hooks close the app, then re-raise the signal so the process ends by it.
    expect(worker.child.exitCode === 0 || worker.child.signalCode === 'SIGTERM').toBe(true);
    expect(worker.output).toContain('returned 2 unfinished task(s) of "chaos.slow" to their queue on shutdown');
    expect(await redis.exists(queue.processing('term-1'))).toBe(0);
    expect(await redis.zscore(queue.workers, 'term-1')).toBeNull();
    const pending = await redis.lrange(queue.pending('default'), 0, -1);
    expect(pending.map((entry) => JSON.parse(entry.slice(entry.indexOf('|') + 1)).payload.key)).toEqual([
      'a',
      'b',
      'c',
    ]);
    expect(pending.every((entry) => entry.startsWith('0|'))).toBe(true);
  });
});

@Controller()
class Recorder {
  static handled = new Set<string>();

  @EventPattern('restart.task')
  handle(@Payload() task: { key: string }): void {
    Recorder.handled.add(task.key);
  }
}

describe('chaos: Redis restarted', () => {
  it('reconnects workers and clients by themselves; every task acknowledged before the restart completes', async () => {
    prefix = testPrefix('restart');
    const dir = mkdtempSync(join(tmpdir(), 'tasks-aof-'));
    const args = ['--appendonly', 'yes', '--appendfsync', 'always', '--dir', dir];
    let server = await startRedisServer(args);
    let worker: INestMicroservice | undefined;
    let closeProducer: (() => Promise<void>) | undefined;
    const direct = new Redis(server.url, { maxRetriesPerRequest: null });
    try {
      const module = await Test.createTestingModule({ controllers: [Recorder] }).compile();
      worker = module.createNestMicroservice({
        strategy: new RedisTaskTransport({
          connection: server.url,
          prefix,
          concurrency: 4,
          leaseMs: 10_000,
          heartbeatIntervalMs: 500,
        }),
        logger: false,
      });
      await worker.listen();
      const { client, close } = await producer(server.url);
      closeProducer = close;
      const acknowledged: string[] = [];
      for (let batch = 0; batch < 10; batch++) {
        const keys = Array.from({ length: 300 }, (_, i) => `before-${batch}-${i}`);
        await client.emitBatch(
          'restart.task',
          keys.map((key) => ({ key })),
        );
        acknowledged.push(...keys);
      }
      await server.kill(); // a crash: SIGKILL, AOF with appendfsync always keeps every acknowledged write
      server = await startRedisServer(args, server.port);

      const after = Array.from({ length: 300 }, (_, i) => `after-${i}`);
      await client.emitBatch(
        'restart.task',
        after.map((key) => ({ key })),
      );
      acknowledged.push(...after);
      await waitFor(
        () => acknowledged.every((key) => Recorder.handled.has(key)),
        'every acknowledged task to be handled',
        { timeoutMs: 60_000, intervalMs: 50 },
      );
      const queue = new PrefixKeys(prefix).queue('restart.task');
      await waitFor(
        async () => (await direct.llen(queue.pending('default'))) === 0 && (await direct.llen(queue.ring)) === 0,
        'the queue to drain',
      );
      expect(acknowledged).toHaveLength(3_300);
    } finally {
      await closeProducer?.();
      await worker?.close();
      direct.disconnect();
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('chaos: handlers that throw what JSON cannot hold', () => {
  it('records a BigInt, an object holding one, a circular object and a hostile Proxy as errors, and no worker process dies', async () => {
    prefix = testPrefix('badthrow');
    const env = { PREFIX: prefix, CONCURRENCY: 4, MAX_ATTEMPTS: 2, BACKOFF_MS: 10, REAPER_MS: 50 };
    processes.push(await startWorkerProcess('throw-a', env), await startWorkerProcess('throw-b', env));
    const { client, close } = await producer(process.env.REDIS_URL as string);
    const kinds = ['bigint', 'object', 'circular', 'proxy'];
    await client.emitBatch(
      'chaos.badthrow',
      kinds.map((kind) => ({ key: kind, kind })),
    );
    await close();
    const queue = new PrefixKeys(prefix).queue('chaos.badthrow');
    await waitFor(async () => (await redis.llen(queue.deadLetters)) === 4, 'four dead letters', { timeoutMs: 20_000 });
    const records = (await redis.lrange(queue.deadLetters, 0, -1)).map((raw) => JSON.parse(raw) as DeadLetterRecord);
    const byKind = new Map(records.map((record) => [(record.payload as { kind: string }).kind, record]));
    expect(records.every((record) => record.reason === 'failed' && record.attempts === 2)).toBe(true);
    expect(byKind.get('bigint')?.error?.message).toBe('the handler threw a non-Error value (10n)');
    expect(byKind.get('object')?.error?.message).toBe('{"big":"10n"}');
    expect(byKind.get('circular')?.error?.message).toContain('not serializable');
    // Nest's exception filter itself trips on the Proxy's traps; what it throws is what gets recorded.
    expect(byKind.get('proxy')?.error?.message).toEqual(expect.any(String));
    // Every run ran to its normal end: two attempts each, and both processes still running.
    for (const kind of kinds) expect(Number(await redis.hget(`${prefix}:runs`, kind))).toBe(2);
    expect(processes.every((worker) => worker.child.exitCode === null && worker.child.signalCode === null)).toBe(true);
  });
});

describe('chaos: a poison task that hangs every run', () => {
  it('ends in dead letters as interrupted after maxAttempts shutdowns during runs past slowRunMs, instead of running after every restart', async () => {
    prefix = testPrefix('poison');
    const env = { PREFIX: prefix, CONCURRENCY: 2, MAX_ATTEMPTS: 2, SLOW_RUN_MS: 200, SHUTDOWN_MS: 100 };
    const { client, close } = await producer(process.env.REDIS_URL as string);
    await client.emitBatch('chaos.forever', [{ key: 'poison' }]);
    await close();
    for (let run = 1; run <= 2; run++) {
      const worker = await startWorkerProcess(`poison-${run}`, env);
      processes.push(worker);
      await worker.waitFor('FOREVER poison');
      await worker.waitFor('has been running for');
      await worker.kill('SIGTERM');
      expect(worker.output).toContain('had run past slowRunMs: attempt counted');
    }
    processes.push(await startWorkerProcess('poison-3', env));
    const queue = new PrefixKeys(prefix).queue('chaos.forever');
    await waitFor(async () => (await redis.llen(queue.deadLetters)) === 1, 'the poison task in dead letters');
    const [record] = (await redis.lrange(queue.deadLetters, 0, -1)).map((raw) => JSON.parse(raw) as DeadLetterRecord);
    expect(record).toMatchObject({ reason: 'interrupted', attempts: 2 });
    expect(Number(await redis.hget(`${prefix}:runs`, 'poison'))).toBe(2);
  });
});

@Controller()
class Gated {
  static readonly started = new Set<string>();
  static readonly runs = new Map<string, number>();
  static readonly aborted = new Set<string>();
  static readonly gates = new Map<string, () => void>();
  static readonly waiting = new Map<string, Promise<void>>();

  static gate(name: string): Promise<void> {
    let promise = Gated.waiting.get(name);
    if (!promise) {
      promise = new Promise<void>((resolve) => Gated.gates.set(name, resolve));
      Gated.waiting.set(name, promise);
    }
    return promise;
  }

  @EventPattern<string>('rollback.task')
  async handle(@Payload() task: { key: string; gate?: string }, @Ctx() ctx: RedisTaskContext): Promise<void> {
    Gated.started.add(task.key);
    Gated.runs.set(task.key, (Gated.runs.get(task.key) ?? 0) + 1);
    if (!task.gate) return;
    const signal = ctx.getSignal();
    await Promise.race([
      Gated.gate(task.gate),
      new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true })),
    ]);
    if (signal.aborted) Gated.aborted.add(task.key);
  }
}

describe('chaos: Redis state rolled back (restart from an older snapshot)', () => {
  it('never lets a run claimed before the rollback settle a task claimed after it: every task enqueued after the rollback completes', async () => {
    prefix = testPrefix('rollback');
    const dir = mkdtempSync(join(tmpdir(), 'tasks-rdb-'));
    const args = ['--dir', dir, '--save', '', '--appendonly', 'no'];
    let server = await startRedisServer(args);
    let worker: INestMicroservice | undefined;
    let closeProducer: (() => Promise<void>) | undefined;
    const direct = new Redis(server.url, { maxRetriesPerRequest: null });
    const outcomes: TaskOutcomeEvent[] = [];
    try {
      const module = await Test.createTestingModule({ controllers: [Gated] }).compile();
      const transport = new RedisTaskTransport({
        // Heartbeats a second apart: the tasks enqueued after the rollback are claimed before the first
        // heartbeat after it can tell the old runs they lost their claims (the race that lost tasks).
        connection: server.url,
        prefix,
        concurrency: 8,
        prefetch: 4,
        leaseMs: 20_000,
        heartbeatIntervalMs: 1_000,
      });
      transport.on('task', (event) => outcomes.push(event));
      worker = module.createNestMicroservice({ strategy: transport, logger: false });
      await worker.listen();
      const { client, close } = await producer(server.url);
      closeProducer = close;
      const of = (keys: string[]) => outcomes.filter((event) => keys.some((key) => ids.get(key) === event.id));
      const ids = new Map<string, string>();
      const emit = async (keys: string[], gate?: string) => {
        const receipts = await client.emitBatch(
          'rollback.task',
          keys.map((key) => ({ key, ...(gate ? { gate } : {}) })),
        );
        receipts.forEach((receipt, i) => ids.set(keys[i], receipt.id));
      };

      await emit(['warm-1', 'warm-2']);
      await waitFor(() => of(['warm-1', 'warm-2']).length === 2, 'the warm-up tasks to complete');
      await direct.save(); // the snapshot Redis will come back to

      const before = ['a-1', 'a-2', 'a-3', 'a-4'];
      await emit(before, 'A');
      await waitFor(
        () => before.every((key) => Gated.started.has(key)),
        'the tasks claimed before the rollback to run',
      );
      await server.kill();
      server = await startRedisServer(args, server.port); // back to the snapshot: those claims never happened

      const after = ['b-1', 'b-2', 'b-3', 'b-4'];
      await emit(after, 'B');
      await waitFor(() => after.every((key) => Gated.started.has(key)), 'the tasks enqueued after the rollback to run');
      Gated.gates.get('A')?.();
      await waitFor(() => of(before).length === 4, 'the pre-rollback runs to try to settle');
      // Let a few heartbeats reconcile what the worker runs with what Redis holds before B finishes.
      const beat = async () =>
        Number(await direct.hget(new PrefixKeys(prefix).queue('rollback.task').heartbeats, transport.options.workerId));
      const redisNow = async () => {
        const [seconds, micros] = (await direct.time()).map(Number);
        return seconds * 1000 + Math.floor(micros / 1000);
      };
      const settled = await redisNow();
      await waitFor(async () => (await beat()) > settled + 2_100, 'three heartbeats after the old runs settled');
      Gated.gates.get('B')?.();
      await waitFor(() => of(after).length >= 4, 'the post-rollback tasks to end');
      // And stay ended: a few more heartbeats find nothing to return or rerun.
      const ended = await redisNow();
      await waitFor(async () => (await beat()) > ended + 2_100, 'three more heartbeats');
      expect(after.map((key) => Gated.runs.get(key))).toEqual([1, 1, 1, 1]);

      expect(of(before).every((event) => event.outcome === 'lease-lost')).toBe(true);
      expect(of(after).map((event) => event.outcome)).toEqual(['completed', 'completed', 'completed', 'completed']);
      // No run claimed after the rollback was told to stop (the old runs may be, once a heartbeat sees them).
      expect(after.filter((key) => Gated.aborted.has(key))).toEqual([]);
      const queue = new PrefixKeys(prefix).queue('rollback.task');
      expect(await direct.hlen(queue.processing(transport.options.workerId))).toBe(0);
      expect(await direct.llen(queue.deadLetters)).toBe(0);
    } finally {
      await closeProducer?.();
      await worker?.close();
      direct.disconnect();
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
