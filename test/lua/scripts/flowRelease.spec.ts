import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { RedisTaskClient } from '../../../lib/index.js';
import { TaskAdmin } from '../../../lib/core/admin/admin.js';
import { gatewayOf } from '../../../lib/core/redis/gateway.js';
import { PrefixKeys, QueueKeys } from '../../../lib/core/redis/keys.js';
import { claimAs, deleteKeys, openRedis, testPrefix } from '../../support/redis.js';

// A node's success releases its children in its own settle (ackTasks), when its flow was made on one Redis
// server: the child's task is in its queue when the settle answers, and no event waits for a fold.
const redis = openRedis();
const gateway = gatewayOf(redis);
const worker = 'w1';
let prefix = '';
let client: RedisTaskClient | undefined;

afterEach(async () => {
  await client?.close();
  client = undefined;
  await deleteKeys(redis, prefix);
});

afterAll(async () => {
  await redis.quit();
});

/** A flow made by a client under a prefix of its own (no worker runs). */
async function made(label: string, flow: Parameters<RedisTaskClient['flow']>[0]): Promise<void> {
  prefix = testPrefix(label);
  client = new RedisTaskClient({ connection: redis.options, prefix });
  await client.connect();
  await client.flow(flow);
}

/** A chain a -> b (b on its own pattern, for client c2) and a -> c. */
async function madeFlow(): Promise<{ a: QueueKeys; b: QueueKeys }> {
  await made('flow-release', {
    id: 'f1',
    nodes: [
      { id: 'a', pattern: 'step.a', payload: { n: 1 } },
      { id: 'b', pattern: 'step.b', payload: { n: 2 }, deps: ['a'], clientId: 'c2', priority: 3 },
      { id: 'c', pattern: 'step.a', payload: { n: 3 }, deps: ['a'] },
    ],
  });
  return { a: new QueueKeys(prefix, 'step.a'), b: new QueueKeys(prefix, 'step.b') };
}

/** Claims the next task of `queue`, node `node` of flow `flow`: its token and its envelope. */
async function claimNode(
  queue: QueueKeys,
  node: string,
): Promise<{ token: string; envelope: Record<string, unknown> }> {
  await gateway.heartbeat(queue, worker, 60_000);
  const claimed = await claimAs(redis, queue, worker, 1);
  if (!Array.isArray(claimed)) throw new Error(`nothing claimed: ${claimed}`);
  const [token, entry] = claimed;
  expect(envelopeOf(entry).node).toBe(node);
  return { token, envelope: envelopeOf(entry) };
}

/** Claims the next task of `queue` (node `node` of `flow`) and acknowledges it as the worker does (its index, its result as the reply). */
async function settle(queue: QueueKeys, node: string, result: string, flow = 'f1'): Promise<void> {
  const { token } = await claimNode(queue, node);
  const acked = await gateway.acknowledge(queue, worker, [
    {
      token,
      taskId: `flow.${flow}.${node}`,
      reply: { channel: '', message: result },
      resultTtlMs: 60_000,
      tracked: queue.tracked(`flow.${flow}.${node}`),
    },
  ]);
  expect(acked).toEqual([true]);
}

const settleA = (a: QueueKeys, result: string) => settle(a, 'a', result);

const envelopeOf = (entry: string) => JSON.parse(entry.slice(entry.indexOf('|') + 1)) as Record<string, unknown>;

describe('a flow made on one Redis server', () => {
  it('writes its roots and counts its creation in the one script that makes it: nothing left for a fold', async () => {
    const { a } = await madeFlow();
    const flow = new PrefixKeys(prefix).flow('f1');
    const [entry] = await redis.lrange(a.pending('default'), 0, -1);
    expect(envelopeOf(entry)).toMatchObject({ flow: 'f1', node: 'a', fold: 1, parents: {} });
    expect(await redis.hget(a.task('flow.f1.a'), 'state')).toBe('pending');
    expect((await redis.hget(flow.nodes, 'a'))?.[0]).toBe('r');
    expect(await redis.hget(flow.record, 'counted')).toBe('c');
    const prefixKeys = new PrefixKeys(prefix);
    expect(await redis.hget(prefixKeys.flowCounters, 'created')).toBe('1');
    expect(await redis.zscore(prefixKeys.flowsDue, 'f1')).toBeNull();
    // A root's template is not kept; a node with parents keeps its own until released.
    expect(await redis.hexists(flow.specs, ',a')).toBe(0);
    expect(await redis.hexists(flow.specs, ',b')).toBe(1);
  });
});

describe('a flow node released in its parent settle', () => {
  it("is in its queue, tracked and recorded enqueued when the parent's settle answers, with its parent's result", async () => {
    const { a, b } = await madeFlow();
    const flow = new PrefixKeys(prefix).flow('f1');
    expect(await redis.hget(flow.specs, ',b')).toContain('flow.f1.b');
    // Written by hand: 12345678901234567 is more than a JavaScript (or Lua) number holds.
    await settleA(a, '{"id":"flow.f1.a","response":{"total":0.30000000000000004,"big":12345678901234567}}');

    // No event was left for a fold: the settle itself released b and c.
    expect(await redis.llen(a.flowEvents)).toBe(0);
    const states = await redis.hgetall(flow.nodes);
    expect(Object.fromEntries(Object.entries(states).map(([id, value]) => [id, value[0]]))).toEqual({
      a: 's',
      b: 'r',
      c: 'r',
    });
    // b: its own pattern, its client, its priority (a priority set), tracked and waiting.
    const [member] = await redis.zrange(b.priority('c2'), '0', '0');
    const envelope = envelopeOf(member.slice(15));
    expect(envelope).toMatchObject({ flow: 'f1', node: 'b', fold: 1, id: 'flow.f1.b', clientId: 'c2', priority: 3 });
    expect(envelope.payload).toEqual({ n: 2 });
    // The parent's result as it was written, digit for digit (not through a Lua number).
    expect(member).toContain(
      '"parents":{"a":{"state":"succeeded","result":{"total":0.30000000000000004,"big":12345678901234567}}}',
    );
    expect(await redis.hget(b.task('flow.f1.b'), 'state')).toBe('pending');
    expect(Number(await redis.get(b.pendingCount))).toBe(1);
    expect(await redis.lrange(b.ring, 0, -1)).toEqual(['c2']);
    // Its template went with its release.
    expect(await redis.hexists(flow.specs, ',b')).toBe(0);
    // c: the same pattern as a, its client's list.
    const [entry] = await redis.lrange(a.pending('default'), 0, -1);
    expect(envelopeOf(entry)).toMatchObject({ node: 'c', parents: { a: { state: 'succeeded' } } });
  });

  it('ends a flow without a completion callback in the settle of its last node: its state, its count, its keys expiring', async () => {
    const { a, b } = await madeFlow();
    const keys = new PrefixKeys(prefix);
    const flow = keys.flow('f1');
    await settleA(a, '{"id":"flow.f1.a","response":1}');
    await settle(a, 'c', '{"id":"flow.f1.c","response":2}');
    expect(await redis.hget(flow.record, 'state')).toBe('running');
    await settle(b, 'b', '{"id":"flow.f1.b","response":3}');
    expect(await redis.llen(a.flowEvents)).toBe(0);
    expect(await redis.llen(b.flowEvents)).toBe(0);
    expect(await redis.hmget(flow.record, 'state', 'reason', 'counted')).toEqual(['succeeded', '', 'ce']);
    expect(await redis.hget(keys.flowCounters, 'succeeded')).toBe('1');
    for (const key of [flow.record, flow.nodes, flow.edges, flow.specs, flow.results]) {
      expect(await redis.pttl(key)).toBeGreaterThan(0);
    }
    // As the admin API tells it.
    const admin = TaskAdmin.onConnection(redis, prefix);
    expect(await admin.getFlow('f1')).toMatchObject({ state: 'succeeded' });
    expect(await admin.flowCounts()).toEqual({ created: 1, succeeded: 1, failed: 0, cancelled: 0 });
  });

  it('leaves what the fold must decide to the fold: a result that is an error goes as an event, nothing released', async () => {
    const { a, b } = await madeFlow();
    const flow = new PrefixKeys(prefix).flow('f1');
    await settleA(a, JSON.stringify({ id: 'flow.f1.a', err: { name: 'ResultTooLargeError', message: 'too large' } }));
    expect(await redis.llen(a.flowEvents)).toBe(1);
    expect((await redis.hget(flow.nodes, 'b'))?.[0]).toBe('w');
    expect(await redis.exists(b.priority('c2'))).toBe(0);
  });

  it('goes by the fold when the template is gone (a flow made before templates, or on a Cluster)', async () => {
    const { a } = await madeFlow();
    const flow = new PrefixKeys(prefix).flow('f1');
    await redis.hdel(flow.specs, ',c');
    await settleA(a, JSON.stringify({ id: 'flow.f1.a', response: 1 }));
    // One child without a template: neither is released here (all or nothing), the event waits for the fold.
    expect(await redis.llen(a.flowEvents)).toBe(1);
    expect((await redis.hget(flow.nodes, 'b'))?.[0]).toBe('w');
    expect((await redis.hget(flow.nodes, 'a'))?.[0]).toBe('r');
  });
});

describe('a flow of roots only, on one Redis server', () => {
  /** Roots x and y on step.a (no edges at all). */
  async function madeRoots(): Promise<QueueKeys> {
    await made('flow-roots', {
      id: 'f2',
      nodes: [
        { id: 'x', pattern: 'step.a', payload: {} },
        { id: 'y', pattern: 'step.a', payload: {} },
      ],
    });
    return new QueueKeys(prefix, 'step.a');
  }

  it("does not end in a root's settle while another root runs (a flow's open nodes are all its nodes, not its edges')", async () => {
    const a = await madeRoots();
    const flow = new PrefixKeys(prefix).flow('f2');
    await settle(a, 'x', '{"id":"flow.f2.x","response":1}', 'f2');
    expect(await redis.hmget(flow.record, 'state', 'ended')).toEqual(['running', null]);
    await settle(a, 'y', '{"id":"flow.f2.y","response":2}', 'f2');
    expect(await redis.hmget(flow.record, 'state', 'counted')).toEqual(['succeeded', 'ce']);
  });

  it('awaits a node requeued from dead letters at once: its revival applies in the requeue, so a later settle ends the flow right', async () => {
    const a = await madeRoots();
    const flow = new PrefixKeys(prefix).flow('f2');
    const admin = TaskAdmin.onConnection(redis, prefix);
    // x dies, as a worker dead-letters it (its record says fold), and the fold applies its death.
    const { token, envelope } = await claimNode(a, 'x');
    const record = { id: 'flow.f2.x', pattern: 'step.a', clientId: 'default', reason: 'failed', attempts: 1 };
    const dead = { ...record, payload: {}, flow: 'f2', node: 'x', fold: envelope.fold, parents: {} };
    const letter = { record: JSON.stringify(dead), cap: 100, taskId: 'flow.f2.x', tracked: a.tracked('flow.f2.x') };
    expect(await gateway.deadLetter(a, worker, token, letter)).toBe(true);
    expect(await redis.llen(a.flowEvents)).toBe(1);
    const [seq, , node, outcome, value] = (await redis.lrange(a.flowEvents, 0, 0))[0].split('\n');
    await gateway.flow.fold(new PrefixKeys(prefix).flow('f2'), [seq, node, outcome, value]);
    await redis.del(a.flowEvents);
    expect((await redis.hget(flow.nodes, 'x'))?.[0]).toBe('d');

    // Requeued: x is released again in the requeue's own script, no event left for a fold.
    expect(await admin.requeueDeadLetters('step.a', 'all')).toMatchObject({ requeued: 1 });
    expect(await redis.llen(a.flowEvents)).toBe(0);
    expect((await redis.hget(flow.nodes, 'x'))?.[0]).toBe('r');
    // y (still queued first) then x succeed: the flow succeeded, ended in x's settle.
    await settle(a, 'y', '{"id":"flow.f2.y","response":2}', 'f2');
    expect(await redis.hget(flow.record, 'state')).toBe('running');
    await settle(a, 'x', '{"id":"flow.f2.x","response":1}', 'f2');
    expect(await redis.hmget(flow.record, 'state', 'reason')).toEqual(['succeeded', '']);
  });
});
