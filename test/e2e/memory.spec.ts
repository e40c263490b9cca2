import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from '@jest/globals';
import { deleteKeys, openRedis, redisUrl, testPrefix } from '../support/redis.js';

const run = promisify(execFile);
const WAKEUPS = fileURLToPath(new URL('../../.chaos-build/test/e2e/fixtures/idle-wakeups.js', import.meta.url));
const redis = openRedis();
let prefix = '';

afterAll(async () => {
  await deleteKeys(redis, prefix);
  await redis.quit();
});

describe('memory', () => {
  // Each idle wait of a claim loop once raced a promise that lived as long as the loop, leaving a
  // reaction behind per wait: about 330 bytes per wake-up, for ever (3 MB per 10,000 wake-ups).
  it('keeps a worker that goes idle and is woken 10,000 times at a flat live heap', async () => {
    prefix = testPrefix('memory');
    const { stdout } = await run(process.execPath, ['--expose-gc', WAKEUPS], {
      env: { ...process.env, REDIS_URL: redisUrl(), PREFIX: prefix, CYCLES: '10000' },
      timeout: 120_000,
    });
    const { before, after, cycles } = JSON.parse(stdout.trim().split('\n').pop() as string) as { before: number; after: number; cycles: number };
    expect(cycles).toBe(10_000);
    expect(after - before).toBeLessThan(1);
  }, 150_000);
});
