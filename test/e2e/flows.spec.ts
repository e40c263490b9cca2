import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { Ctx, EventPattern, Payload } from '@nestjs/microservices';
import {
  InvalidFlowError,
  RedisTaskAdmin,
  RedisTaskClient,
  RedisTaskContext,
  TaskCancelledError,
  type FlowParentResult,
  type FlowSummary,
} from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { startProducer, startWorker } from '../support/nest.js';
import { deleteKeys, gate, keysUnder, openRedis, testPrefix, waitFor } from '../support/redis.js';

const redis = openRedis();
const started: { close(): Promise<unknown> }[] = [];
let prefix = '';

/** How often each node ran (by flow id and node id), what each saw of its parents, the callbacks. */
const ran = new Map<string, number>();
const saw = new Map<string, Readonly<Record<string, FlowParentResult>>>();
let summaries: { summary: FlowSummary; id: string }[] = [];
/** Nodes that fail until fixed; nodes that wait for their gate (and record why they were aborted). */
const failing = new Set<string>();
const gates = new Map<string, ReturnType<typeof gate>>();
const aborted = new Map<string, unknown>();

interface Step {
  readonly name: string;
  readonly add?: number;
}

@Controller()
class Steps {
  @EventPattern<string>('flow.step')
  async step(@Payload() step: Step, @Ctx() ctx: RedisTaskContext): Promise<unknown> {
    const flow = ctx.getFlow();
    const key = `${flow?.flowId}/${flow?.nodeId}`;
    ran.set(key, (ran.get(key) ?? 0) + 1);
    saw.set(key, ctx.parentResults());
    const held = gates.get(key);
    if (held) {
      await Promise.race([
        held.promise,
        new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true })),
      ]);
      if (ctx.signal.aborted) {
        aborted.set(key, ctx.signal.reason);
        return undefined;
      }
    }
    if (failing.has(key)) throw new Error(`step ${step.name} failed`);
    // Each step adds to the sum of its parents' results: a chain carries its total along.
    const parents = Object.values(ctx.parentResults());
    const sum = parents.reduce(
      (total, parent) => total + (parent.state === 'succeeded' ? Number(parent.result) : 0),
      0,
    );
    return sum + (step.add ?? 1);
  }

  @EventPattern<string>('flow.big')
  big(): string {
    return 'x'.repeat(1_000);
  }

  @EventPattern<string>('flow.done')
  done(@Payload() summary: FlowSummary, @Ctx() ctx: RedisTaskContext): void {
    summaries.push({ summary, id: ctx.getTaskId() });
  }
}

afterEach(async () => {
  for (const held of gates.values()) held.open();
  await Promise.all(started.splice(0).map((app) => app.close()));
  await deleteKeys(redis, prefix);
  ran.clear();
  saw.clear();
  summaries = [];
  failing.clear();
  gates.clear();
  aborted.clear();
});

afterAll(async () => {
  await redis.quit();
});

async function producer(): Promise<{ client: RedisTaskClient; admin: RedisTaskAdmin }> {
  const { client, module } = await startProducer(prefix);
  started.push(module);
  return { client, admin: new RedisTaskAdmin(client) };
}

async function worker(options: Parameters<typeof startWorker>[2] = {}): Promise<void> {
  const app = await startWorker(prefix, [Steps], {
    heartbeatIntervalMs: 100,
    reaperIntervalMs: 200,
    maxAttempts: 1,
    ...options,
  });
  started.push(app.app);
}

const node = (id: string, deps: string[] = [], more: Record<string, unknown> = {}) => ({
  id,
  pattern: 'flow.step',
  payload: { name: id },
  deps,
  ...more,
});

const diamond = (policy?: string) => [
  node('A'),
  node('B', ['A']),
  node('C', ['A']),
  node('D', ['B', 'C'], policy ? { onParentFailure: policy } : {}),
];

describe('flows: tasks that depend on tasks', () => {
  it('runs a diamond: each node once, after its parents, D seeing the results of B and C', async () => {
    prefix = testPrefix('flow-diamond');
    const { client, admin } = await producer();
    await worker();
    const receipt = await client.flow({ id: 'd1', nodes: diamond(), onComplete: { pattern: 'flow.done' } });
    expect(receipt).toEqual({
      flowId: 'd1',
      created: true,
      taskIds: { A: 'flow.d1.A', B: 'flow.d1.B', C: 'flow.d1.C', D: 'flow.d1.D' },
    });
    await waitFor(() => summaries.length === 1, 'the completion callback');
    expect(Object.fromEntries(ran)).toEqual({ 'd1/A': 1, 'd1/B': 1, 'd1/C': 1, 'd1/D': 1 });
    expect(saw.get('d1/A')).toEqual({});
    expect(saw.get('d1/B')).toEqual({ A: { state: 'succeeded', result: 1 } });
    expect(saw.get('d1/D')).toEqual({ B: { state: 'succeeded', result: 2 }, C: { state: 'succeeded', result: 2 } });
    expect(summaries[0]).toEqual({
      id: 'flow-complete.d1',
      summary: { flowId: 'd1', state: 'succeeded', succeeded: 4, failed: 0, cancelled: 0, skipped: 0, failedIds: [] },
    });
    const status = await admin.getFlow('d1');
    expect(status).toMatchObject({ id: 'd1', state: 'succeeded', ended: true, callbackId: 'flow-complete.d1' });
    expect(Object.fromEntries(status.nodes.map((n) => [n.id, [n.state, n.result]]))).toEqual({
      A: ['succeeded', 1],
      B: ['succeeded', 2],
      C: ['succeeded', 2],
      D: ['succeeded', 5],
    });
    expect(await admin.flowCounts()).toEqual({ created: 1, succeeded: 1, failed: 0, cancelled: 0 });
  });

  it('runs a chain of 5, each node handed its parent result', async () => {
    prefix = testPrefix('flow-chain');
    const { client, admin } = await producer();
    await worker();
    const nodes = ['n1', 'n2', 'n3', 'n4', 'n5'].map((id, i, all) => ({
      id,
      pattern: 'flow.step',
      payload: { name: id, add: 10 ** i },
      deps: i === 0 ? [] : [all[i - 1]],
    }));
    await client.flow({ id: 'c1', nodes });
    const status = await waitFor(async () => {
      const flow = await admin.getFlow('c1');
      return flow.ended ? flow : undefined;
    }, 'the chain to end');
    expect(status.state).toBe('succeeded');
    expect(status.nodes.find((n) => n.id === 'n5')?.result).toBe(11111);
    expect([...ran.values()]).toEqual([1, 1, 1, 1, 1]);
  });

  it('fail-flow: a failed parent fails the flow; a running sibling is stopped through its fence, the waiting node cancelled', async () => {
    prefix = testPrefix('flow-fail');
    const { client, admin } = await producer();
    await worker();
    failing.add('f1/B');
    gates.set('f1/C', gate());
    await client.flow({ id: 'f1', nodes: diamond(), onComplete: { pattern: 'flow.done' } });
    await waitFor(() => summaries.length === 1, 'the completion callback');
    expect(aborted.get('f1/C')).toBeInstanceOf(TaskCancelledError);
    expect(ran.has('f1/D')).toBe(false);
    expect(summaries[0].summary).toMatchObject({
      flowId: 'f1',
      state: 'failed',
      reason: 'node "B" failed; node "D" fails the flow (fail-flow)',
      succeeded: 1,
      failed: 1,
      cancelled: 2,
      failedIds: ['B'],
    });
    const status = await admin.getFlow('f1');
    expect(Object.fromEntries(status.nodes.map((n) => [n.id, n.state]))).toEqual({
      A: 'succeeded',
      B: 'failed',
      C: 'cancelled',
      D: 'cancelled',
    });
    expect(status.nodes.find((n) => n.id === 'B')?.error).toMatchObject({ message: 'step B failed', reason: 'failed' });
  });

  it('skip: the dependent of a failed parent is skipped and recorded, the flow ends failed', async () => {
    prefix = testPrefix('flow-skip');
    const { client, admin } = await producer();
    await worker();
    failing.add('s1/B');
    await client.flow({ id: 's1', nodes: [...diamond('skip'), node('E', ['D'], { onParentFailure: 'skip' })] });
    const status = await waitFor(async () => {
      const flow = await admin.getFlow('s1');
      return flow.ended ? flow : undefined;
    }, 'the flow to end');
    expect(status.state).toBe('failed');
    expect(Object.fromEntries(status.nodes.map((n) => [n.id, n.state]))).toEqual({
      A: 'succeeded',
      B: 'failed',
      C: 'succeeded',
      D: 'skipped',
      E: 'skipped',
    });
    expect(ran.has('s1/D') || ran.has('s1/E')).toBe(false);
  });

  it('run: the dependent runs once every parent settled and sees the failure', async () => {
    prefix = testPrefix('flow-run');
    const { client, admin } = await producer();
    await worker();
    failing.add('r1/B');
    await client.flow({ id: 'r1', nodes: diamond('run') });
    await waitFor(async () => (await admin.getFlow('r1')).ended, 'the flow to end');
    expect(saw.get('r1/D')).toEqual({
      B: { state: 'failed', error: { name: 'Error', message: 'step B failed', reason: 'failed' } },
      C: { state: 'succeeded', result: 2 },
    });
    expect((await admin.getFlow('r1')).state).toBe('failed');
  });

  it('hands a child a typed error instead of a result larger than maxResultBytes (the parent still succeeded)', async () => {
    prefix = testPrefix('flow-large');
    const { client, admin } = await producer();
    await worker({ maxResultBytes: 200 });
    await client.flow({ id: 'l1', nodes: [{ id: 'big', pattern: 'flow.big' }, node('after', ['big'])] });
    await waitFor(async () => (await admin.getFlow('l1')).ended, 'the flow to end');
    expect(saw.get('l1/after')).toEqual({
      big: {
        state: 'succeeded',
        result: null,
        error: expect.objectContaining({ name: 'ResultTooLargeError', code: 'RESULT_TOO_LARGE' }),
      },
    });
    expect((await admin.getFlow('l1')).state).toBe('succeeded');
  });

  it('a flow that cannot be folded holds up no other flow whose events come after its own', async () => {
    prefix = testPrefix('flow-isolated');
    const { client } = await producer();
    for (const id of ['x', 'y']) await client.flow({ id, nodes: [node('A'), node('B', ['A'])] });
    // x's record is a stray string: each fold of x's events fails, and x's come first (one task at a time).
    const record = new PrefixKeys(prefix).flow('x').record;
    await redis.del(record);
    await redis.set(record, 'stray');
    await worker({ concurrency: 1 });
    await waitFor(() => ran.get('y/B') === 1, "y's second node, released after x's fold failed");
    expect(ran.get('x/A')).toBe(1);
    expect(ran.has('x/B')).toBe(false);
  });

  it('refuses cycles, unknown dependencies and duplicate ids naming the node, writing nothing', async () => {
    prefix = testPrefix('flow-invalid');
    const { client } = await producer();
    const refused = async (nodes: ReturnType<typeof node>[]) => {
      const error = await client.flow({ id: 'bad', nodes }).catch((thrown: unknown) => thrown);
      expect(error).toBeInstanceOf(InvalidFlowError);
      return error as InvalidFlowError;
    };
    const cycle = await refused([node('A', ['C']), node('B', ['A']), node('C', ['B']), node('D', ['C'])]);
    expect(cycle.message).toMatch(/node "[ABC]" is on a cycle/);
    expect(['A', 'B', 'C']).toContain(cycle.node);
    expect((await refused([node('A'), node('B', ['X'])])).node).toBe('B');
    expect((await refused([node('A'), node('A')])).message).toContain('two nodes have the id "A"');
    expect((await refused([node('A', ['A'])])).node).toBe('A');
    expect(await keysUnder(redis, prefix)).toEqual([]);
  });

  it('creates one flow however often flow() is called with its id', async () => {
    prefix = testPrefix('flow-idempotent');
    const { client, admin } = await producer();
    const first = await client.flow({ id: 'i1', nodes: diamond() });
    const again = await client.flow({ id: 'i1', nodes: diamond() });
    expect([first.created, again.created]).toEqual([true, false]);
    await worker();
    await waitFor(async () => (await admin.getFlow('i1')).ended, 'the flow to end');
    expect(Object.fromEntries(ran)).toEqual({ 'i1/A': 1, 'i1/B': 1, 'i1/C': 1, 'i1/D': 1 });
  });

  it('cancelFlow: the running node is aborted, the waiting ones cancelled, nothing released after', async () => {
    prefix = testPrefix('flow-cancel');
    const { client, admin } = await producer();
    await worker();
    gates.set('x1/B', gate());
    await client.flow({
      id: 'x1',
      nodes: [node('A'), node('B', ['A']), node('C', ['B'])],
      onComplete: { pattern: 'flow.done' },
    });
    await waitFor(() => ran.has('x1/B'), 'B to run');
    expect(await admin.cancelFlow('x1', 'not needed')).toEqual({ cancelled: true, stopped: 1 });
    await waitFor(() => summaries.length === 1, 'the completion callback');
    expect(aborted.get('x1/B')).toBeInstanceOf(TaskCancelledError);
    expect(summaries[0].summary).toMatchObject({ state: 'cancelled', reason: 'cancelled (not needed)', cancelled: 2 });
    expect(ran.has('x1/C')).toBe(false);
    expect(await admin.cancelFlow('x1')).toEqual({ cancelled: false, state: 'cancelled' });
  });

  it('awaits a dead letter requeued while the flow runs; after it ended, a requeued node releases nothing', async () => {
    prefix = testPrefix('flow-requeue');
    const { client, admin } = await producer();
    await worker();
    failing.add('q1/B');
    gates.set('q1/A', gate());
    await client.flow({ id: 'q1', nodes: [node('A'), node('B')] });
    await waitFor(
      async () => (await admin.getFlow('q1')).nodes.find((n) => n.id === 'B')?.state === 'failed',
      'B to fail',
    );
    failing.delete('q1/B');
    expect(await admin.requeueDeadLetters('flow.step', 'all')).toMatchObject({ requeued: 1 });
    await waitFor(() => ran.get('q1/B') === 2, 'B to run again');
    gates.get('q1/A')?.open();
    const status = await waitFor(async () => {
      const flow = await admin.getFlow('q1');
      return flow.ended ? flow : undefined;
    }, 'the flow to end');
    expect(status.state).toBe('succeeded');

    failing.add('q2/B');
    await client.flow({ id: 'q2', nodes: [node('B'), node('D', ['B'])] });
    await waitFor(async () => (await admin.getFlow('q2')).ended, 'q2 to end');
    failing.delete('q2/B');
    await admin.requeueDeadLetters('flow.step', 'all');
    await waitFor(() => ran.get('q2/B') === 2, 'B of q2 to run again');
    await waitFor(async () => (await redis.llen(`${prefix}:{flow.step}:flow-events`)) === 0, 'its settle folded');
    expect((await admin.getFlow('q2')).state).toBe('failed');
    expect(ran.has('q2/D')).toBe(false);
  });
});
