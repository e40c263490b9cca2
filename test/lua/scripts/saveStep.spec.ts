import { describe, expect, it } from '@jest/globals';
import { redis, gateway, keys, worker, enqueue, claim, useLuaHarness } from '../harness.js';

useLuaHarness();

const save = (token: string, what: 'result' | 'checkpoint' | 'failure', name = '', value = '') =>
  gateway.steps.save(keys, worker, token, { taskId: '1', what, name, value, keepMs: 60_000 });

describe('saveStep', () => {
  it('saves a step once, a checkpoint last-wins, failures counted; each with the TTL; fenced on the token', async () => {
    await enqueue(['a', ['1']]);
    const [token] = (await claim('a', 1)) as string[];
    expect(await save(token, 'result', 'charge', '={"id":"ch_1"}')).toEqual({ kind: 'saved' });
    // A resent save (or a second run's) keeps the first result and counts it once.
    expect(await save(token, 'result', 'charge', '={"id":"ch_2"}')).toEqual({ kind: 'saved' });
    expect(await save(token, 'checkpoint', '', '=1')).toEqual({ kind: 'saved' });
    expect(await save(token, 'checkpoint', '', '=2')).toEqual({ kind: 'saved' });
    expect(await save(token, 'failure', 'index')).toEqual({ kind: 'failures', count: 1 });
    expect(await save(token, 'failure', 'index')).toEqual({ kind: 'failures', count: 2 });
    expect(await gateway.steps.load(keys, '1')).toEqual({
      'r:charge': '={"id":"ch_1"}',
      done: '1',
      cp: '=2',
      'f:index': '2',
    });
    const ttl = await redis.pttl(keys.steps('1'));
    expect(ttl).toBeGreaterThan(50_000);
    expect(ttl).toBeLessThanOrEqual(60_000);
    // Another run's token (or one whose task was recovered elsewhere) writes nothing.
    await redis.hdel(keys.processing(worker), token);
    const before = await gateway.steps.load(keys, '1');
    expect(await save(token, 'result', 'ship', '="x"')).toBe('lost');
    expect(await save(token, 'checkpoint', '', '=3')).toBe('lost');
    expect(await gateway.steps.load(keys, '1')).toEqual(before);
  });

  it('sets a stray key of another type aside and saves (recorded in the faults)', async () => {
    await enqueue(['a', ['1']]);
    const [token] = (await claim('a', 1)) as string[];
    await redis.set(keys.steps('1'), 'stray');
    expect(await save(token, 'result', 'a', '=1')).toEqual({ kind: 'saved' });
    expect(await redis.hget(keys.steps('1'), 'r:a')).toBe('=1');
    expect(await redis.hget(keys.faults, keys.steps('1'))).toContain('held a string');
  });
});
