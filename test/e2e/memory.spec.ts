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
  // with classes instead (the rest is promoted by the producer, ioredis and Nest in this one process).
  it('lets scavenges promote under 3,000 bytes per task (the execution and context of a run die young)', () => {
    expect(figures.cycles).toBe(10_000);
    expect(figures.promotedPerTask).toBeLessThan(3_000);
  });
});
