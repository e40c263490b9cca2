import type { Redis } from 'ioredis';
import { RedisTaskRecordBuilder } from '../lib/index.js';
import type { BenchTask, OursDriver } from './drivers.js';
import { Completion, deleteMatching, roundSample, serverSnapshot, shownSample } from './measure.js';

/** Emits per round (in emitBatch calls of 1,000). */
const EMITS = 10_000;
const BATCH = 1_000;

/** How a round's emits are keyed: none, each its own key, or 100 emits per key (replaced in place). */
export type CoalesceCase = 'plain' | 'own key' | '100 per key';
const CASES: readonly CoalesceCase[] = ['plain', 'own key', '100 per key'];

interface Round {
  /** Redis CPU (µs) and commands (Lua's own included) per emit, enqueue alone. */
  readonly enqueueMicros: number;
  readonly enqueueCommands: number;
  /** The same for the drain, per emit (a replaced emit costs nothing more to drain). */
  readonly drainMicros: number;
  readonly drainCommands: number;
  /** Emits per second, emitBatch of 1,000. */
  readonly rate: number;
}

function record(i: number, kind: CoalesceCase): BenchTask | RedisTaskRecordBuilder<BenchTask> {
  const task = { i, t: performance.now() };
  if (kind === 'plain') return task;
  return new RedisTaskRecordBuilder(task).setCoalesceKey(kind === 'own key' ? `k${i}` : `k${i % (EMITS / 100)}`);
}

async function round(driver: OursDriver, redis: Redis, kind: CoalesceCase): Promise<Round> {
  await driver.begin('coalesce');
  const items = Array.from({ length: EMITS }, (_, i) => record(i, kind));
  const built = items.map((item) => (item instanceof RedisTaskRecordBuilder ? item.build() : item));
  const before = await serverSnapshot(redis);
  const start = performance.now();
  for (let at = 0; at < EMITS; at += BATCH) await driver.emitRecords(built.slice(at, at + BATCH));
  const rate = EMITS / ((performance.now() - start) / 1000);
  const enqueued = await serverSnapshot(redis);
  const runs = kind === '100 per key' ? EMITS / 100 : EMITS;
  const done = new Completion();
  await driver.startWorker(16, () => done.hit());
  await done.until(runs);
  await driver.stopWorker();
  const drained = await serverSnapshot(redis);
  await deleteMatching(redis, driver.keyPattern);
  return {
    enqueueMicros: (enqueued.cpuMicros - before.cpuMicros) / EMITS,
    enqueueCommands: (enqueued.commands - before.commands) / EMITS,
    drainMicros: (drained.cpuMicros - enqueued.cpuMicros) / EMITS,
    drainCommands: (drained.commands - enqueued.commands) / EMITS,
    rate,
  };
}

const sample = roundSample;
const shown = shownSample;

/**
 * What a coalescing key costs per emit against a plain emit: 10,000 emits (emitBatch of 1,000) each
 * plain, each with its own key (every emit makes its key's record), or 100 per key (99 of each 100 replace
 * the waiting task in place), then drained by one worker of concurrency 16. Rounds take turns.
 */
export async function coalesceRows(driver: OursDriver, redis: Redis, repeats: number): Promise<string> {
  for (const kind of CASES) await round(driver, redis, kind); // warm-up (JIT), not reported
  const rounds = new Map<CoalesceCase, Round[]>(CASES.map((kind) => [kind, []]));
  for (let r = 0; r < repeats; r++) for (const kind of CASES) rounds.get(kind)?.push(await round(driver, redis, kind));
  const rows = CASES.map((kind) => {
    const of = (field: keyof Round) => sample((rounds.get(kind) ?? []).map((one) => one[field]));
    const total = sample((rounds.get(kind) ?? []).map((one) => one.enqueueMicros + one.drainMicros));
    return `| ${kind} | ${shown(of('rate'), 0)} | ${shown(of('enqueueMicros'), 1)} | ${shown(of('enqueueCommands'), 1)} | ${shown(of('drainMicros'), 1)} | ${shown(of('drainCommands'), 1)} | ${shown(total, 1)} |`;
  });
  return [
    '| emits | emitBatch (emits/s) | enqueue: Redis CPU per emit (µs) | enqueue: Redis commands per emit | drain: Redis CPU per emit (µs) | drain: Redis commands per emit | Redis CPU per emit, in all (µs) |',
    '|---|---:|---:|---:|---:|---:|---:|',
    ...rows,
  ].join('\n');
}

/** What bench/RESULTS.md says above the coalescing rows. */
export const COALESCE_INTRO = [
  '## What coalescing costs',
  '',
  `nestjs-redis-tasks alone: ${EMITS.toLocaleString('en-US')} emits (emitBatch of ${BATCH.toLocaleString('en-US')}) each plain, each with a coalescing key of`,
  "its own (every emit makes its key's record), or 100 emits per key (99 of each 100 replace the waiting task in place:",
  "one run per key), then drained by one worker of concurrency 16; rounds taking turns. Redis commands count Lua's own.",
];
