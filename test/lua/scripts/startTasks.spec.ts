import { describe, expect, it } from '@jest/globals';
import { keys, redis, useLuaHarness, worker } from '../harness.js';
import { queueHelpers } from '../scenarios.js';

useLuaHarness();
const { gateway, enqueue, claimAll } = queueHelpers(redis, worker);

/** The fencing tokens of a claim's token/entry pairs, in claim order. */
const tokensOf = (claimed: string[]) => claimed.filter((_, i) => i % 2 === 0);

/** Tracked tasks t1 (client a) and t2 (client b), claimed and recorded running: their tokens. */
async function twoRunning(): Promise<[string, string]> {
  await enqueue(keys, [
    { id: 't1', track: true },
    { id: 't2', client: 'b', track: true },
  ]);
  const [first, second] = tokensOf(await claimAll(keys));
  await gateway.track.start(keys, worker, [
    { token: first, id: 't1', attempt: 1 },
    { token: second, id: 't2', attempt: 1 },
  ]);
  return [first, second];
}

/** The successes of t1 and t2 acknowledged as they ride on a claim (one that claims nothing): its lost tokens. */
async function ackBoth(first: string, second: string): Promise<readonly string[]> {
  const { lost } = await gateway.claim(keys, {
    workerId: worker,
    wanted: 0,
    clientConcurrency: 0,
    leaseMs: 60_000,
    tokenPrefix: 'ack.',
    acks: [`${first}\tt1`, `${second}\tt2`],
  });
  return lost;
}

describe('startTasks', () => {
  it('records each held task running under its token, and answers a token it no longer holds as lost', async () => {
    await enqueue(keys, [
      { id: 't1', track: true },
      { id: 't2', client: 'b', track: true },
    ]);
    expect(await redis.exists(keys.tracked('t1').entry)).toBe(1);
    const [first, second] = tokensOf(await claimAll(keys));
    const answers = await gateway.track.start(keys, worker, [
      { token: first, id: 't1', attempt: 1 },
      { token: 'not-held', id: 'tx', attempt: 1 },
      { token: second, id: 't2', attempt: 2 },
    ]);
    expect(answers).toEqual(['run', 'lost', 'run']);
    expect(await redis.hgetall(keys.task('t2'))).toMatchObject({
      state: 'running',
      token: second,
      attempt: '2',
      worker,
    });
    // Its entry key (kept for a cancel while it waited) went with the start.
    expect(await redis.exists(keys.tracked('t1').entry)).toBe(0);
    expect(await redis.exists(keys.tracked('t2').entry)).toBe(0);
  });

  it("drops a retry's due time and why when the task runs again, and keeps the rest of its index", async () => {
    await enqueue(keys, [{ id: 't1', track: true }]);
    // As a retry leaves it waiting (trackFollow `retried`): its due time and why on the index.
    await redis.hset(keys.task('t1'), 'state', 'delayed', 'due', Date.now(), 'why', 'retry');
    const [token] = tokensOf(await claimAll(keys));
    expect(await gateway.track.start(keys, worker, [{ token, id: 't1', attempt: 2 }])).toEqual(['run']);
    const index = await redis.hgetall(keys.task('t1'));
    expect(index).toMatchObject({ state: 'running', token, attempt: '2', id: 't1', client: 'a' });
    expect(index).not.toHaveProperty('due');
    expect(index).not.toHaveProperty('why');
  });

  it('cancels a task asked to be cancelled between places once, even when its token comes twice in one call', async () => {
    await enqueue(keys, [{ id: 't1', track: true }]);
    await redis.hset(keys.task('t1'), 'cancel', 'asked');
    const [token] = tokensOf(await claimAll(keys));
    const answers = await gateway.track.start(keys, worker, [
      { token, id: 't1', attempt: 1 },
      { token, id: 't1', attempt: 1 },
    ]);
    // The second sees it gone and its index cancelled (as a resent call would): never recorded running.
    expect(answers).toEqual(['cancelled', 'cancelled']);
    expect(await redis.hget(keys.task('t1'), 'state')).toBe('cancelled');
    expect(await redis.hget(keys.counters, 'cancelled')).toBe('1');
    expect(await redis.hlen(keys.processing(worker))).toBe(0);
  });

  it("completes a tracked task's index when its success rides on a claim, and leaves it when the token is no longer held", async () => {
    const [first, second] = await twoRunning();
    await redis.hdel(keys.processing(worker), second); // recovered by a reaper meanwhile
    expect(await ackBoth(first, second)).toEqual([second]);
    const index = await redis.hgetall(keys.task('t1'));
    // An ended index keeps who ran it last, its token too (nothing reads a token once the task ended).
    expect(index).toMatchObject({ state: 'completed', result: '', worker, attempt: '1', token: first });
    expect(await redis.hget(keys.task('t2'), 'state')).toBe('running');
    expect(await redis.hget(keys.counters, 'completed')).toBe('1');
    expect(await redis.hlen(keys.processing(worker))).toBe(0);
  });

  it("writes an index as it is at its creation, and replaces an earlier run's index of the same id whole", async () => {
    await enqueue(keys, [
      { id: 't1', track: true },
      { id: 't2', client: 'b', track: true, priority: 3 },
    ]);
    const created = await redis.hgetall(keys.task('t1'));
    // No `at` (its `enq` is its last change) and no `priority` of 0.
    expect(created).toMatchObject({ id: 't1', state: 'pending', client: 'a' });
    expect(Object.keys(created).filter((field) => field === 'at' || field === 'priority')).toEqual([]);
    expect(await redis.hget(keys.task('t2'), 'priority')).toBe('3');
    // An earlier life of t1's id: its fields must not survive the new index.
    await redis.hset(keys.task('t1'), { state: 'dead', reason: 'handler-failed', worker: 'w0', progress: '7' });
    await redis.del(keys.pending('a'), keys.pending('b'));
    await enqueue(keys, [{ id: 't1', track: true }]);
    expect(await redis.hgetall(keys.task('t1'))).toEqual({ ...created, enq: expect.any(String) as unknown });
    expect(await redis.pttl(keys.task('t1'))).toBeGreaterThan(0);
  });

  it('drops a cancel mark or a due time a success finds on the index, and keeps its last run', async () => {
    const [first, second] = await twoRunning();
    // Stray fields of the states the task left (written by hand: no step of a run leaves them).
    await redis.hset(keys.task('t1'), { cancel: 'late', due: '1', why: 'retry' });
    expect(await ackBoth(first, second)).toEqual([]);
    for (const id of ['t1', 't2']) {
      const index = await redis.hgetall(keys.task(id));
      expect(index).toMatchObject({ state: 'completed', worker, attempt: '1' });
      expect(Object.keys(index).filter((field) => ['cancel', 'due', 'why'].includes(field))).toEqual([]);
      expect(Number(index.at)).toBeGreaterThanOrEqual(Number(index.started));
    }
  });

  it('leaves a task recorded running under the same token as it is (a resent call)', async () => {
    await enqueue(keys, [{ id: 't1', track: true }]);
    const [token] = tokensOf(await claimAll(keys));
    expect(await gateway.track.start(keys, worker, [{ token, id: 't1', attempt: 1 }])).toEqual(['run']);
    const at = await redis.hget(keys.task('t1'), 'at');
    await redis.hset(keys.task('t1'), 'at', '1');
    expect(await gateway.track.start(keys, worker, [{ token, id: 't1', attempt: 1 }])).toEqual(['run']);
    expect(at).not.toBe('1');
    expect(await redis.hget(keys.task('t1'), 'at')).toBe('1');
  });
});
