/**
 * Durable steps (README "Durable steps"): what a step costs against a plain task. One worker of concurrency 16
 * in this process runs tasks emitted in batches: plain tasks, and tasks of STEPS steps each (`ctx.step`, a small
 * result). A step's cost is the stepped task's less the plain task's, divided by its steps: Redis CPU and
 * commands (Lua's own included), and this process's CPU (producer and worker). BullMQ's "process step jobs"
 * pattern (a `job.updateData()` per step) is the anchor: the same tasks and steps as BullMQ jobs.
 */
import 'reflect-metadata';
import { randomBytes } from 'node:crypto';
import { Controller, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Ctx, EventPattern } from '@nestjs/microservices';
import { Queue, Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import { RedisTaskClient, RedisTaskContext, RedisTaskTransport } from '../lib/index.js';
import { Completion, deleteMatching, roundSample, serverSnapshot, shownSample } from './measure.js';

/** Tasks per round, steps per stepped task. */
const TASKS = 2_000;
const STEPS = 10;

const done = new Completion();

@Controller()
class StepHandlers {
  @EventPattern<string>('bench.plain')
  plain(): void {
    done.hit();
  }

  @EventPattern<string>('bench.stepped')
  async stepped(@Ctx() ctx: RedisTaskContext): Promise<void> {
    for (let i = 0; i < STEPS; i++) await ctx.step(`s${i}`, () => ({ i }));
    done.hit();
  }
}

@Module({ controllers: [StepHandlers] })
class StepModule {}

type StepCase = 'plain task' | `task of ${number} steps` | `BullMQ job, ${number} updateData()`;
const PLAIN: StepCase = 'plain task';
const STEPPED: StepCase = `task of ${STEPS} steps`;
const BULL: StepCase = `BullMQ job, ${STEPS} updateData()`;
const BULL_PLAIN = 'BullMQ job';

interface Round {
  /** Per task: Redis CPU (µs), Redis commands, this process's CPU (µs); tasks per second. */
  readonly redisMicros: number;
  readonly commands: number;
  readonly nodeMicros: number;
  readonly rate: number;
}

async function measured(redis: Redis, run: () => Promise<void>): Promise<Round> {
  const before = await serverSnapshot(redis);
  const cpu = process.cpuUsage();
  const start = performance.now();
  await run();
  const seconds = (performance.now() - start) / 1000;
  const used = process.cpuUsage(cpu);
  const after = await serverSnapshot(redis);
  return {
    redisMicros: (after.cpuMicros - before.cpuMicros) / TASKS,
    commands: (after.commands - before.commands) / TASKS,
    nodeMicros: (used.user + used.system) / TASKS,
    rate: TASKS / seconds,
  };
}

async function oursRound(url: string, redis: Redis, pattern: 'bench.plain' | 'bench.stepped'): Promise<Round> {
  const prefix = `bs${randomBytes(3).toString('hex')}`;
  const worker = await NestFactory.createMicroservice(StepModule, {
    strategy: new RedisTaskTransport({ connection: url, prefix, concurrency: 16 }),
    logger: false,
  });
  await worker.listen();
  const client = new RedisTaskClient({ connection: url, prefix });
  await client.connect();
  done.reset();
  try {
    return await measured(redis, async () => {
      for (let at = 0; at < TASKS; at += 500) {
        await client.emitBatch(
          pattern,
          Array.from({ length: 500 }, (_, i) => ({ i: at + i })),
        );
      }
      await done.until(TASKS);
    });
  } finally {
    await client.close();
    await worker.close();
    await deleteMatching(redis, `${prefix}:*`);
  }
}

/** BullMQ: jobs added in bulk, one Worker of 16; a stepped job calls `job.updateData()` once per step. */
async function bullRound(url: string, redis: Redis, steps: number): Promise<Round> {
  const parsed = new URL(url);
  const connection = { host: parsed.hostname, port: Number(parsed.port || 6379), maxRetriesPerRequest: null };
  const prefix = `bq${randomBytes(3).toString('hex')}`;
  const queue = new Queue('steps', { connection, prefix });
  const completion = new Completion();
  const worker = new Worker(
    'steps',
    async (job) => {
      for (let i = 0; i < steps; i++) await job.updateData({ ...(job.data as object), step: i, result: { i } });
      completion.hit();
    },
    { connection, prefix, concurrency: 16, removeOnComplete: { count: 0 } },
  );
  await worker.waitUntilReady();
  try {
    return await measured(redis, async () => {
      for (let at = 0; at < TASKS; at += 500) {
        await queue.addBulk(
          Array.from({ length: 500 }, (_, i) => ({
            name: 'job',
            data: { i: at + i },
            opts: { removeOnComplete: true },
          })),
        );
      }
      await completion.until(TASKS);
    });
  } finally {
    await worker.close();
    await queue.close();
    await deleteMatching(redis, `${prefix}:*`);
  }
}

const CASES = [PLAIN, STEPPED, BULL_PLAIN, BULL] as const;

/**
 * What a durable step costs: per task of each kind, and per step (a stepped task less a plain one, over its steps),
 * ours against BullMQ's step pattern. Rounds take turns.
 */
export async function stepRows(url: string, redis: Redis, repeats: number): Promise<string> {
  const run = (kind: (typeof CASES)[number]) =>
    kind === PLAIN
      ? oursRound(url, redis, 'bench.plain')
      : kind === STEPPED
        ? oursRound(url, redis, 'bench.stepped')
        : bullRound(url, redis, kind === BULL ? STEPS : 0);
  for (const kind of CASES) await run(kind); // warm-up (JIT), not reported
  const rounds = new Map<string, Round[]>(CASES.map((kind) => [kind, []]));
  for (let r = 0; r < repeats; r++) for (const kind of CASES) rounds.get(kind)?.push(await run(kind));
  const of = (kind: string, field: keyof Round) => (rounds.get(kind) ?? []).map((one) => one[field]);
  const rows = CASES.map((kind) => {
    const sample = (field: keyof Round, digits: number) => shownSample(roundSample(of(kind, field)), digits);
    return `| ${kind} | ${sample('rate', 0)} | ${sample('redisMicros', 1)} | ${sample('commands', 1)} | ${sample('nodeMicros', 0)} |`;
  });
  // Per step: each round's stepped task less the same round's plain one, over the steps.
  const perStep = (stepped: string, plain: string) => {
    const step = (field: keyof Round, digits: number) =>
      shownSample(roundSample(of(stepped, field).map((value, r) => (value - of(plain, field)[r]) / STEPS)), digits);
    return `| ${step('redisMicros', 1)} | ${step('commands', 2)} | ${step('nodeMicros', 0)} |`;
  };
  return [
    '| task | tasks/s | Redis CPU per task (µs) | Redis commands per task | Node CPU per task (µs) |',
    '|---|---:|---:|---:|---:|',
    ...rows,
    '',
    '| one step | Redis CPU (µs) | Redis commands | Node CPU (µs) |',
    '|---|---:|---:|---:|',
    `| nestjs-redis-tasks \`ctx.step\` ${perStep(STEPPED, PLAIN)}`,
    `| BullMQ \`job.updateData()\` ${perStep(BULL, BULL_PLAIN)}`,
  ].join('\n');
}

/** What bench/RESULTS.md says above the step rows. */
export const STEP_INTRO = [
  '## What a durable step costs',
  '',
  `${TASKS} tasks per round, emitted 500 per call, run by one worker of concurrency 16 in the benchmark's process; rounds taking`,
  `turns. A stepped task runs ${STEPS} \`ctx.step\` calls with a small result each; BullMQ's "process step jobs" pattern calls`,
  "`job.updateData()` once per step. Per step: a round's stepped task less its plain one, over the steps. Redis CPU and commands",
  "(Lua's own included) from INFO; Node CPU is this process's (producer and worker together). A step is one script call",
  "(saveStep: its fence, HEXISTS of the run's token; the result written once, HSETNX; the count of finished steps, HINCRBY;",
  "its TTL renewed by a run's first save, then daily) plus, once per run, the read of the steps saved so far; its task is",
  "acknowledged on its own (which deletes its steps) instead of riding on the next claim. BullMQ's `updateData` is a plain",
  'write: no lock check (a stalled job\'s old processor can still write it), no "once" (a step done twice is written twice).',
];
