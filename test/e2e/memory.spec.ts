import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { deleteKeys, openRedis, redisUrl, testPrefix } from '../support/redis.js';

const run = promisify(execFile);
const WAKEUPS = fileURLToPath(new URL('../../.chaos-build/test/e2e/fixtures/idle-wakeups.js', import.meta.url));
const redis = openRedis();
let prefix = '';

interface WakeupFigures {
  readonly before: number;
  readonly after: number;
  readonly cycles: number;
  /** Bytes scavenges promoted to the old generation during the cycles, per task. */
  readonly promotedPerTask: number;
}
let figures: WakeupFigures;

beforeAll(async () => {
  prefix = testPrefix('memory');
  const { stdout } = await run(process.execPath, ['--expose-gc', WAKEUPS], {
    env: { ...process.env, REDIS_URL: redisUrl(), PREFIX: prefix, CYCLES: '10000' },
    timeout: 120_000,
  });
  figures = JSON.parse(stdout.trim().split('\n').pop() as string) as WakeupFigures;
}, 150_000);

afterAll(async () => {
  await deleteKeys(redis, prefix);
  await redis.quit();
});

describe('memory', () => {
  // Each idle wait of a claim loop once raced a promise that lived as long as the loop, leaving a
  // reaction behind per wait: about 330 bytes per wake-up, for ever (3 MB per 10,000 wake-ups).
  it('keeps a worker that goes idle and is woken 10,000 times at a flat live heap', () => {
    expect(figures.cycles).toBe(10_000);
    expect(figures.after - figures.before).toBeLessThan(1);
  });

  // A run's objects live well under a millisecond, so few of them should outlive the young generation.
  // An object literal with a getter (a closure per run: the execution the runner hands to the transport,
  // and the transport's ctx.getTask()) gets a hidden class of its own, made in the old generation, which
  // kept the run's objects alive through scavenges: 3.7 KB promoted per task here, against about 2.0 KB
  // with classes instead.
  // Then 1.6 KB per task was still promoted: Maps and Sets that gained and lost an entry per task (the
  // producer's waiting parts, the worker's runs, a claim loop's calls, cleared per-turn Maps) rehash into
  // new tables that V8 links to their successors, so one promoted table kept every later one, and what
  // each held, alive through scavenges. Slot lists and dictionary objects instead (churn-tables.ts):
  // 3 to 220 bytes per task.
  it('lets scavenges promote under 600 bytes per task (what a task leaves in tables dies young)', () => {
    expect(figures.cycles).toBe(10_000);
    expect(figures.promotedPerTask).toBeLessThan(600);
  });
});
