import { describe, expect, it } from '@jest/globals';
import { PrefixKeys, type FlowKeys } from '../../../lib/core/redis/keys.js';
import type { FlowFold } from '../../../lib/core/redis/flow-gateway.js';
import { redis, gateway, keys, prefix, worker, useLuaHarness } from '../harness.js';
import { queueHelpers } from '../scenarios.js';

useLuaHarness();

const flowKeys = (): FlowKeys => new PrefixKeys(prefix).flow('f1');
const spec = (payload: number) => JSON.stringify({ pattern: 'q', clientId: 'a', payload });

/** Flow f1 made of `[id, edges]` pairs (edges: `<policy>|<dep>,<dep>`); its generation. */
async function open(nodes: [string, string][]): Promise<string> {
  const opened = await gateway.flow.open(
    flowKeys(),
    60_000,
    JSON.stringify({ pattern: 'cb' }),
    undefined,
    nodes.map(([id, edges], i) => [id, edges, spec(i), '']),
  );
  return opened.created;
}

/** Each node's state letter. */
async function states(): Promise<Record<string, string>> {
  const all = await redis.hgetall(flowKeys().nodes);
  return Object.fromEntries(Object.entries(all).map(([id, value]) => [id, value.charAt(0)]));
}

const released = (fold: FlowFold) => (fold.kind === 'flow' ? fold.releases.map((r) => r.node).sort() : []);
const stopped = (fold: FlowFold) => (fold.kind === 'flow' ? fold.stops.map((s) => s.node).sort() : []);
const DIAMOND: [string, string][] = [
  ['a', 'f|'],
  ['b', 'f|a'],
  ['c', 'f|a'],
  ['d', 'f|b,c'],
];

describe('foldFlow', () => {
  it('releases a node once its parents all settled, answers it until marked enqueued, and applies each event once', async () => {
    await open(DIAMOND);
    expect(released(await gateway.flow.fold(flowKeys(), []))).toEqual(['a']);
    // Answered again (a crash may have cut its enqueue off) until marked.
    expect(released(await gateway.flow.fold(flowKeys(), []))).toEqual(['a']);
    await gateway.flow.mark(flowKeys(), 'released', ['a']);
    const afterA = await gateway.flow.fold(flowKeys(), ['10', 'a', 's', '{"id":"x","response":7}']);
    expect(released(afterA)).toEqual(['b', 'c']);
    expect(afterA.kind === 'flow' && afterA.releases[0].parents).toEqual([
      { id: 'a', state: 's', raw: '{"id":"x","response":7}' },
    ]);
    await gateway.flow.mark(flowKeys(), 'released', ['b', 'c']);
    // b settles; the same event folded again (two folders at once) and an older one change nothing.
    await gateway.flow.fold(flowKeys(), ['11', 'b', 's', '{"id":"x","response":1}']);
    await gateway.flow.fold(flowKeys(), ['11', 'b', 's', '{"id":"x","response":1}', '9', 'b', 'd', '{}']);
    expect(await states()).toEqual({ a: 's', b: 's', c: 'r', d: 'w' });
    const last = await gateway.flow.fold(flowKeys(), ['12', 'c', 's', '{"id":"x","response":2}']);
    expect(released(last)).toEqual(['d']);
    await gateway.flow.mark(flowKeys(), 'released', ['d']);
    const end = await gateway.flow.fold(flowKeys(), ['13', 'd', 's', '{"id":"x","response":3}']);
    expect(end).toMatchObject({ kind: 'flow', state: 'succeeded', ended: 'now' });
    expect(await gateway.flow.fold(flowKeys(), [])).toMatchObject({ ended: 'before' });
  });

  it('fail-flow: a failed parent fails the flow at once, cancels what waits and answers what runs as to stop', async () => {
    await open(DIAMOND);
    await gateway.flow.fold(flowKeys(), []);
    await gateway.flow.mark(flowKeys(), 'released', ['a']);
    await gateway.flow.fold(flowKeys(), ['10', 'a', 's', '']);
    await gateway.flow.mark(flowKeys(), 'released', ['b', 'c']);
    const failed = await gateway.flow.fold(flowKeys(), ['11', 'b', 'd', '{"reason":"failed","message":"no"}']);
    expect(failed).toMatchObject({
      state: 'failed',
      ended: '',
      reason: 'node "b" failed; node "d" fails the flow (fail-flow)',
    });
    expect(stopped(failed)).toEqual(['c']);
    expect(await states()).toEqual({ a: 's', b: 'd', c: 'r', d: 'c' });
    // c's stop comes back as its cancel: the flow ends.
    expect(await gateway.flow.fold(flowKeys(), ['12', 'c', 'c', 'stopped'])).toMatchObject({
      ended: 'now',
      state: 'failed',
    });
  });

  it('skip cascades through the policies it meets; run releases once every parent settled', async () => {
    await open([
      ['a', 'f|'],
      ['b', 's|a'],
      ['c', 's|b'],
      ['d', 'r|a'],
    ]);
    await gateway.flow.fold(flowKeys(), []);
    await gateway.flow.mark(flowKeys(), 'released', ['a']);
    const fold = await gateway.flow.fold(flowKeys(), ['10', 'a', 'd', '{"reason":"failed","message":"no"}']);
    expect(released(fold)).toEqual(['d']);
    expect(await states()).toEqual({ a: 'd', b: 'k', c: 'k', d: 'q' });
    expect(fold.kind === 'flow' && fold.releases[0].parents[0]).toMatchObject({ id: 'a', state: 'd' });
  });

  it('reads a node whose stored state is no letter it knows (a hand edit) as not succeeded: named in the reason, and the fold goes on', async () => {
    await open([
      ['a', 'f|'],
      ['b', 'f|'],
      ['c', 'f|b'],
      ['d', 'f|'],
    ]);
    await gateway.flow.fold(flowKeys(), []);
    await gateway.flow.mark(flowKeys(), 'released', ['a', 'b', 'd']);
    await redis.hset(flowKeys().nodes, 'b', 'x/3');
    // A waiting child of it fails the flow under fail-flow.
    expect(await gateway.flow.fold(flowKeys(), ['10', 'a', 's', ''])).toMatchObject({
      state: 'failed',
      reason: 'node "b" did not succeed; node "c" fails the flow (fail-flow)',
    });
    // With no child waiting on it, the flow's end names it.
    await redis.del(...Object.values(flowKeys()));
    await open([
      ['a', 'f|'],
      ['b', 'f|'],
    ]);
    await gateway.flow.fold(flowKeys(), []);
    await gateway.flow.mark(flowKeys(), 'released', ['a', 'b']);
    await redis.hset(flowKeys().nodes, 'b', 'x/3');
    expect(await gateway.flow.fold(flowKeys(), ['11', 'a', 's', ''])).toMatchObject({
      state: 'failed',
      ended: 'now',
      reason: 'node "b" did not succeed',
    });
  });

  it('awaits a node revived from dead letters while the flow runs; after the flow ended, its events change nothing', async () => {
    await open([
      ['a', 'f|'],
      ['b', 'f|'],
    ]);
    await gateway.flow.fold(flowKeys(), []);
    await gateway.flow.mark(flowKeys(), 'released', ['a', 'b']);
    await gateway.flow.fold(flowKeys(), ['10', 'b', 'd', '{}', '11', 'b', 'p', '']);
    expect(await states()).toEqual({ a: 'r', b: 'r' });
    await gateway.flow.fold(flowKeys(), ['12', 'b', 's', '', '13', 'a', 'd', '{}']);
    expect(await gateway.flow.fold(flowKeys(), [])).toMatchObject({ state: 'failed', ended: 'before' });
    await gateway.flow.fold(flowKeys(), ['14', 'a', 'p', '', '15', 'a', 's', '']);
    expect(await states()).toEqual({ a: 'd', b: 's' });
  });

  it('cancelFlow cancels what waits and leaves what runs to the stops; its keys expire once its end is counted and its callback on record', async () => {
    const created = await open(DIAMOND);
    await gateway.flow.fold(flowKeys(), []);
    expect(await gateway.flow.cancel(flowKeys(), 'why')).toBe('running');
    expect(await gateway.flow.cancel(flowKeys(), 'why')).toBe('cancelled');
    const fold = await gateway.flow.fold(flowKeys(), []);
    expect(stopped(fold)).toEqual(['a']);
    expect(fold.kind === 'flow' && fold.stops[0].state).toBe('q');
    expect(await gateway.flow.mark(flowKeys(), 'gone', ['a'])).toBe(1);
    expect(await gateway.flow.fold(flowKeys(), [])).toMatchObject({
      state: 'cancelled',
      ended: 'now',
      reason: 'cancelled (why)',
    });
    const counters = new PrefixKeys(prefix);
    const marker = counters.flowCounted('f1', created, 'e');
    expect(await gateway.flow.count(counters.flowCounters, marker, 'cancelled', 60_000)).toBe(true);
    expect(await gateway.flow.count(counters.flowCounters, marker, 'cancelled', 60_000)).toBe(false);
    expect(await redis.hget(counters.flowCounters, 'cancelled')).toBe('1');
    await gateway.flow.recordCounted(flowKeys(), 'ce');
    expect(await redis.pttl(flowKeys().record)).toBe(-1); // its callback is not on record yet
    expect(await gateway.flow.recordCallback(flowKeys(), 'cb-1')).toBe(true);
    expect(await gateway.flow.recordCallback(flowKeys(), 'cb-1')).toBe(false);
    for (const key of Object.values(flowKeys()).slice(1)) expect(await redis.pttl(key)).toBeGreaterThan(0);
  });
});

describe('a tracked node of a flow cancelled by the steps of tracking', () => {
  const { enqueue, claimAll } = queueHelpers(redis, worker);
  const lastEvent = async () => (await redis.lindex(keys.flowEvents, -1))?.split('\n').slice(1, 4);

  it('revokeTask: the waiting node leaves, and its flow hears it cancelled', async () => {
    await enqueue(keys, [{ id: 't1', track: true, flow: 'f1' }]);
    expect(await gateway.track.revoke(keys, 't1', 'why', 'call-1')).toEqual({ outcome: 'cancelled', state: 'pending' });
    expect(await lastEvent()).toEqual(['f1', 'n1', 'c']);
  });

  it('startTasks: a node asked to cancel between places is cancelled at its start, and its flow hears it', async () => {
    await enqueue(keys, [{ id: 't1', track: true, flow: 'f1' }]);
    const [token] = await claimAll(keys);
    await redis.hset(keys.task('t1'), 'cancel', 'why');
    expect(await gateway.track.start(keys, worker, [{ token, id: 't1', attempt: 1 }])).toEqual(['cancelled']);
    expect(await lastEvent()).toEqual(['f1', 'n1', 'c']);
  });
});
