import type { Redis } from 'ioredis';
import type { OursDriver } from './drivers.js';
import { Completion, deleteMatching, roundSample, serverSnapshot, shownSample } from './measure.js';

/** Tasks per round (emitBatch of 1,000 each). */
const TASKS = 10_000;
const CHUNK = 1_000;

/** How a round's tasks are grouped: not at all, one batch of all of them, or 100 batches of 100. */
type BatchCase = 'plain' | 'one batch' | '100 batches';
const CASES: readonly BatchCase[] = ['plain', 'one batch', '100 batches'];

interface Round {
  /** Redis CPU (µs) and commands (Lua's own included) per task, from the first add to the callbacks' enqueue. */
  readonly micros: number;
  readonly commands: number;
  /** Tasks per second, from the first add until every callback ran (plain: until every task ran). */
  readonly rate: number;
}

async function round(driver: OursDriver, redis: Redis, kind: BatchCase): Promise<Round> {
  await driver.begin('batches');
  const done = new Completion();
  // The callbacks come to the same pattern, as tasks with a `batchId`: counted apart.
  let callbacks = 0;
  await driver.startWorker(16, (data) => {
    if ((data as unknown as { batchId?: string }).batchId === undefined) done.hit();
    else callbacks++;
  });
  const batches = kind === 'plain' ? 0 : kind === 'one batch' ? 1 : 100;
  const before = await serverSnapshot(redis);
  const start = performance.now();
  if (kind === 'plain') {
    for (let at = 0; at < TASKS; at += CHUNK) await driver.emitRecords(tasks(at, CHUNK));
  } else {
    const size = TASKS / batches;
    for (let b = 0; b < batches; b++) {
      const batch = driver.batch({ onComplete: { pattern: 'bench.task' } });
      for (let at = 0; at < size; at += CHUNK)
        await batch.add('bench.task', tasks(b * size + at, Math.min(CHUNK, size - at)));
      await batch.seal();
    }
  }
  await done.until(TASKS);
  while (callbacks < batches) await new Promise((resolve) => setTimeout(resolve, 5));
  const rate = TASKS / ((performance.now() - start) / 1000);
  const after = await serverSnapshot(redis);
  await driver.stopWorker();
  await deleteMatching(redis, driver.keyPattern);
  return {
    micros: (after.cpuMicros - before.cpuMicros) / TASKS,
    commands: (after.commands - before.commands) / TASKS,
    rate,
  };
}

function tasks(from: number, count: number): { i: number; t: number }[] {
  return Array.from({ length: count }, (_, i) => ({ i: from + i, t: performance.now() }));
}

const sample = roundSample;
const shown = shownSample;

/**
 * What a batch costs per task against a plain task: 10,000 tasks enqueued (emitBatch / batch.add of 1,000)
 * and drained by one worker of concurrency 16 (its reaper folding the settles every 100 ms), plain, as one
 * batch, or as 100 batches of 100, until every callback ran. Rounds take turns.
 */
export async function batchRows(driver: OursDriver, redis: Redis, repeats: number): Promise<string> {
  for (const kind of CASES) await round(driver, redis, kind); // warm-up (JIT), not reported
  const rounds = new Map<BatchCase, Round[]>(CASES.map((kind) => [kind, []]));
  for (let r = 0; r < repeats; r++) {
    for (const kind of CASES) rounds.get(kind)?.push(await round(driver, redis, kind));
  }
  const rows = CASES.map((kind) => {
    const of = (field: keyof Round) => sample((rounds.get(kind) ?? []).map((one) => one[field]));
    return `| ${kind} | ${shown(of('rate'), 0)} | ${shown(of('micros'), 1)} | ${shown(of('commands'), 1)} |`;
  });
  return [
    '| tasks | enqueue to last callback (tasks/s) | Redis CPU per task (µs) | Redis commands per task |',
    '|---|---:|---:|---:|',
    ...rows,
  ].join('\n');
}

/** What bench/RESULTS.md says above the batch rows. */
export const BATCH_INTRO = [
  '## What batches cost',
  '',
  `nestjs-redis-tasks alone: ${TASKS.toLocaleString('en-US')} tasks enqueued in calls of ${CHUNK.toLocaleString('en-US')} and drained by one worker of concurrency 16`,
  '(its reaper folding the settles every 100 ms), plain, as one batch, or as 100 batches of 100, timed until every callback',
  "ran; rounds taking turns. Redis CPU and commands (Lua's own included) per task cover the enqueue, the drain, the folding",
  'and the callbacks.',
];
