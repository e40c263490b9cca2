import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { Ctx, EventPattern, Payload } from '@nestjs/microservices';
import { firstValueFrom } from 'rxjs';
import { requeueProcessing } from '../../lib/core/redis/requeue.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import {
  InvalidTaskError,
  LeaseLostError,
  RedisTaskAdmin,
  RedisTaskContext,
  RedisTaskRecordBuilder,
  type RedisTaskClient,
  type TaskOutcomeEvent,
} from '../../lib/index.js';
import { startProducer, startWorker, type Worker } from '../support/nest.js';
import { deleteKeys, gate, keysUnder, newestDeadLetter, openRedis, testPrefix, waitFor } from '../support/redis.js';

const redis = openRedis();

/** What the handlers saw: each step function's runs (by task and step), each run's attempt, what they threw. */
const seen = {
  stepRuns: new Map<string, number>(),
  runAttempts: new Map<string, number[]>(),
  results: new Map<string, unknown>(),
  thrown: [] as string[],
  stepKeys: new Map<string, Set<string>>(),
  items: [] as number[],
};
let held = gate();
let entered = gate();

function stepRan(id: string, name: string): void {
  const key = `${id}/${name}`;
  seen.stepRuns.set(key, (seen.stepRuns.get(key) ?? 0) + 1);
}

function runStarted(ctx: RedisTaskContext): void {
  const attempts = seen.runAttempts.get(ctx.getTaskId()) ?? [];
  attempts.push(ctx.getAttempt());
  seen.runAttempts.set(ctx.getTaskId(), attempts);
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Controller()
class Steps {
  /** Three steps; the second fails on the first run (after the first step was saved). */
  @EventPattern<string>('three')
  async three(@Ctx() ctx: RedisTaskContext): Promise<void> {
    const id = ctx.getTaskId();
    runStarted(ctx);
    const keys = seen.stepKeys.get(id) ?? new Set<string>();
    keys.add(ctx.stepKey('charge'));
    seen.stepKeys.set(id, keys);
    const when = await ctx.step('a', () => {
      stepRan(id, 'a');
      return { at: new Date(0), n: 1 };
    });
    const b = await ctx.step('b', () => {
      stepRan(id, 'b');
      if (ctx.getAttempt() === 1) throw new Error('the API said 503');
      return 'b';
    });
    const c = await ctx.step('c', () => {
      stepRan(id, 'c');
      return undefined;
    });
    seen.results.set(id, { when, b, c });
  }

  /** Ten items behind a checkpoint; the run fails at item 5 on its first attempt. */
  @EventPattern<string>('cursor')
  async cursor(@Ctx() ctx: RedisTaskContext): Promise<void> {
    runStarted(ctx);
    for (let i = (await ctx.getCheckpoint<number>()) ?? 0; i < 10; i++) {
      if (i === 5 && ctx.getAttempt() === 1) throw new Error('lost the connection at item 5');
      seen.items.push(i);
      await ctx.checkpoint(i + 1);
    }
  }

  /** Many steps, each failing once where the payload says: per-step attempts or whole-task attempts. */
  @EventPattern<string>('many')
  async many(
    @Payload() task: { steps: number; failEvery: number; perStep: boolean },
    @Ctx() ctx: RedisTaskContext,
  ): Promise<void> {
    const id = ctx.getTaskId();
    runStarted(ctx);
    for (let i = 0; i < task.steps; i++) {
      await ctx.step(
        `s-${i}`,
        () => {
          stepRan(id, `s-${i}`);
          if (i % task.failEvery === task.failEvery - 1 && seen.stepRuns.get(`${id}/s-${i}`) === 1) {
            throw new Error(`step ${i} failed once`);
          }
          return i;
        },
        task.perStep ? { attempts: 3, backoff: { type: 'fixed', delayMs: 1 } } : undefined,
      );
    }
    seen.results.set(id, 'done');
  }

  /** The same steps, with attempts counted per step for the whole pattern (handler extra `stepAttempts`). */
  @EventPattern<string>('many.by-pattern', { stepAttempts: 3 })
  manyByPattern(@Payload() task: { steps: number; failEvery: number }, @Ctx() ctx: RedisTaskContext): Promise<void> {
    return this.many({ ...task, perStep: false }, ctx);
  }

  /** Slow steps: a run longer than maxRuntimeMs, or a worker shutting down, gives the task back between them. */
  @EventPattern<string>('slow', { maxRuntimeMs: 60 })
  async slow(@Payload() task: { steps: number; stepMs: number }, @Ctx() ctx: RedisTaskContext): Promise<void> {
    const id = ctx.getTaskId();
    runStarted(ctx);
    try {
      for (let i = 0; i < task.steps; i++) {
        await ctx.step(`s-${i}`, async () => {
          stepRan(id, `s-${i}`);
          entered.open();
          await sleep(task.stepMs);
          return i;
        });
      }
    } catch (error) {
      seen.thrown.push((error as Error).name);
      throw error;
    }
    seen.results.set(id, 'done');
  }

  /** A step that waits for the test (the run that holds it may lose its task meanwhile). */
  @EventPattern<string>('held')
  async held(@Ctx() ctx: RedisTaskContext): Promise<void> {
    const id = ctx.getTaskId();
    runStarted(ctx);
    const attempt = ctx.getAttempt();
    try {
      await ctx.step('first', () => stepRan(id, 'first'));
      const value = await ctx.step('a', async () => {
        stepRan(id, 'a');
        entered.open();
        if (attempt === 1) await held.promise;
        return `run ${attempt}`;
      });
      seen.results.set(`${id}/${attempt}`, value);
    } catch (error) {
      seen.thrown.push(error instanceof LeaseLostError ? 'LeaseLostError' : String(error));
      throw error;
    }
  }

  /** Misuse: a bad name, a result too large. */
  @EventPattern<string>('misuse')
  async misuse(@Payload() what: 'name' | 'large', @Ctx() ctx: RedisTaskContext): Promise<void> {
    runStarted(ctx);
    if (what === 'name') {
      try {
        await ctx.step('', () => 1);
      } catch (error) {
        seen.thrown.push(error instanceof InvalidTaskError ? 'InvalidTaskError' : String(error));
      }
      return;
    }
    await ctx.step('big', () => 'x'.repeat(600 * 1024));
  }
}

let prefix = '';
let keys: PrefixKeys;
const started: { close(): Promise<unknown> }[] = [];

async function setUp(
  name: string,
  workerOptions = {},
): Promise<{ client: RedisTaskClient; admin: RedisTaskAdmin; worker: Worker; outcomes: TaskOutcomeEvent[] }> {
  prefix = testPrefix(name);
  keys = new PrefixKeys(prefix);
  const { client, module } = await startProducer(prefix);
  started.push(module);
  const worker = await startWorker(prefix, [Steps], {
    maxAttempts: 3,
    backoff: { type: 'fixed', delayMs: 10 },
    ...workerOptions,
  });
  started.push(worker.app);
  const outcomes: TaskOutcomeEvent[] = [];
  worker.transport.on('task', (event) => outcomes.push(event));
  return { client, admin: new RedisTaskAdmin(client), worker, outcomes };
}

async function emit(client: RedisTaskClient, pattern: string, payload: unknown, id: string, tracked = false) {
  const builder = new RedisTaskRecordBuilder(payload).setId(id);
  await firstValueFrom(client.emit(pattern, tracked ? builder.setTracked(true).build() : builder.build()));
}

async function stepKeysLeft(): Promise<string[]> {
  return (await keysUnder(redis, prefix)).filter((key) => key.includes(':steps:'));
}

afterEach(async () => {
  held.open();
  await Promise.all(started.splice(0).map((app) => app.close()));
  await deleteKeys(redis, prefix);
  held = gate();
  entered = gate();
  for (const table of [seen.stepRuns, seen.runAttempts, seen.results, seen.stepKeys]) table.clear();
  seen.thrown.length = 0;
  seen.items.length = 0;
});

afterAll(() => {
  redis.disconnect();
});

describe('durable steps (ctx.step)', () => {
  it('runs each step once across attempts: a retry gets the saved results, and the steps go when the task ends', async () => {
    const { client, outcomes } = await setUp('steps-once');
    await emit(client, 'three', {}, 't1');
    await waitFor(() => seen.results.has('t1'), 'the second run to finish');
    expect(seen.runAttempts.get('t1')).toEqual([1, 2]);
    expect([seen.stepRuns.get('t1/a'), seen.stepRuns.get('t1/b'), seen.stepRuns.get('t1/c')]).toEqual([1, 2, 1]);
    // The same JSON value whether the step ran now or before (a Date comes back as its string both ways).
    expect(seen.results.get('t1')).toEqual({ when: { at: new Date(0).toISOString(), n: 1 }, b: 'b', c: undefined });
    // A stable idempotency key: the same on every attempt.
    expect(seen.stepKeys.get('t1')?.size).toBe(1);
    await waitFor(() => outcomes.some((event) => event.outcome === 'completed'), 'the task to complete');
    expect(await stepKeysLeft()).toEqual([]);
  });

  it('resumes an iteration from its checkpoint, each item once', async () => {
    const { client } = await setUp('steps-cursor');
    await emit(client, 'cursor', {}, 'c1');
    await waitFor(() => seen.items.length === 10, 'every item');
    expect(seen.items).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(seen.runAttempts.get('c1')).toEqual([1, 2]);
    await waitFor(async () => (await stepKeysLeft()).length === 0, 'the steps to go');
  });

  it('per-step attempts: 1,000 steps with 1% failing once complete on the first attempt; whole-task attempts die of the sum', async () => {
    const { client, outcomes } = await setUp('steps-many');
    await emit(client, 'many', { steps: 1_000, failEvery: 100, perStep: true }, 'per-step');
    await emit(client, 'many', { steps: 1_000, failEvery: 100, perStep: false }, 'whole');
    await emit(client, 'many.by-pattern', { steps: 1_000, failEvery: 100 }, 'by-pattern');
    await waitFor(() => seen.results.get('per-step') === 'done', 'the per-step task to complete', {
      timeoutMs: 60_000,
    });
    // Ten step failures, none counted against the task's 3 attempts.
    expect(seen.runAttempts.get('per-step')).toEqual(Array.from({ length: 11 }, () => 1));
    for (let i = 0; i < 1_000; i++) {
      expect(seen.stepRuns.get(`per-step/s-${i}`)).toBe(i % 100 === 99 ? 2 : 1);
    }
    // The pattern's stepAttempts does the same for every step that names no attempts of its own.
    await waitFor(() => seen.results.get('by-pattern') === 'done', 'the task of the pattern to complete', {
      timeoutMs: 60_000,
    });
    expect(seen.runAttempts.get('by-pattern')).toEqual(Array.from({ length: 11 }, () => 1));
    // Whole-task attempts: the third failing step ends the task in dead letters, its finished steps gone with it.
    const dead = await newestDeadLetter(redis, keys.queue('many'));
    expect(dead).toMatchObject({ id: 'whole', reason: 'failed', attempts: 3 });
    expect(seen.runAttempts.get('whole')).toEqual([1, 2, 3]);
    expect(seen.stepRuns.get('whole/s-299')).toBe(1);
    expect(seen.stepRuns.has('whole/s-300')).toBe(false);
    expect(seen.results.has('whole')).toBe(false);
    await waitFor(() => outcomes.filter((event) => event.outcome === 'completed').length === 2, 'the outcomes');
    await waitFor(async () => (await stepKeysLeft()).length === 0, 'the steps of both to go');
  }, 90_000);

  it('maxRuntimeMs: a long run gives its task back at a step boundary, no attempt counted, each step once', async () => {
    const { client, outcomes } = await setUp('steps-budget');
    await emit(client, 'slow', { steps: 8, stepMs: 25 }, 'b1');
    await waitFor(() => seen.results.get('b1') === 'done', 'the task to finish over several runs');
    const attempts = seen.runAttempts.get('b1') ?? [];
    expect(attempts.length).toBeGreaterThan(1);
    expect(attempts.every((attempt) => attempt === 1)).toBe(true);
    for (let i = 0; i < 8; i++) expect(seen.stepRuns.get(`b1/s-${i}`)).toBe(1);
    expect(seen.thrown.every((name) => name === 'TaskYieldedError')).toBe(true);
    await waitFor(() => outcomes.some((event) => event.outcome === 'completed'), 'the completion');
    expect(outcomes.filter((event) => event.outcome === 'yielded')).toHaveLength(attempts.length - 1);
    expect(await redis.hget(keys.queue('slow').counters, 'yielded')).toBe(String(attempts.length - 1));
    expect(await redis.hget(keys.queue('slow').counters, 'failed')).toBeNull();
  });

  it('a deploy (close) gives the task back at the next step boundary; the next worker goes on from there', async () => {
    const { client, worker, outcomes } = await setUp('steps-deploy', { maxRuntimeMs: 0 });
    await emit(client, 'slow', { steps: 40, stepMs: 20 }, 'd1');
    await entered.promise;
    await waitFor(() => (seen.stepRuns.get('d1/s-3') ?? 0) === 1, 'a few steps');
    await worker.app.close();
    // Given back at a step boundary (a claim already under way when the worker began to stop may take it once
    // more: that run gives it back at its first step).
    expect(outcomes.length).toBeGreaterThanOrEqual(1);
    expect(outcomes.every((event) => event.outcome === 'yielded')).toBe(true);
    expect(seen.results.has('d1')).toBe(false);
    // The next worker of the deploy.
    const next = await startWorker(prefix, [Steps], { backoff: { type: 'fixed', delayMs: 10 } });
    started.push(next.app);
    await waitFor(() => seen.results.get('d1') === 'done', 'the next worker to finish it');
    expect(seen.runAttempts.get('d1')?.every((attempt) => attempt === 1)).toBe(true);
    for (let i = 0; i < 40; i++) expect(seen.stepRuns.get(`d1/s-${i}`)).toBe(1);
  });

  it('is fenced: a run whose task was recovered elsewhere saves nothing, and the new run saves its own result', async () => {
    const { client, worker } = await setUp('steps-fenced', {
      heartbeatIntervalMs: 30_000,
      leaseMs: 60_000,
      reaperIntervalMs: false,
    });
    await emit(client, 'held', {}, 'f1');
    await entered.promise;
    // What a reaper does once the worker's lease expired: the task goes back to its list (attempt counted).
    await requeueProcessing(
      redis,
      keys.queue('held'),
      { workerId: worker.transport.options.workerId, deadLetterCap: 10, resultTtlMs: 1_000 },
      { countAttempt: true },
    );
    await waitFor(() => seen.results.get('f1/2') === 'run 2', 'the recovered run to save its step');
    held.open();
    await waitFor(() => seen.thrown.includes('LeaseLostError'), 'the first run to be refused its save');
    expect(seen.stepRuns.get('f1/a')).toBe(2);
    expect(seen.stepRuns.get('f1/first')).toBe(1);
    expect(seen.results.has('f1/1')).toBe(false);
    await waitFor(async () => (await stepKeysLeft()).length === 0, 'the steps to go with the task');
  });

  it("a cancelled task's steps go with it: a new task of the same id starts afresh", async () => {
    const { client, admin } = await setUp('steps-cancel');
    await emit(client, 'held', {}, 'x1', true);
    await entered.promise;
    expect(await stepKeysLeft()).toHaveLength(1);
    const cancel = await admin.cancel('held', 'x1', 'the order was withdrawn');
    expect(cancel).toEqual({ cancelled: true, was: 'running' });
    held.open();
    await waitFor(() => seen.thrown.includes('LeaseLostError'), 'the cancelled run to be refused its save');
    expect(await stepKeysLeft()).toEqual([]);
  });

  it('getTask shows the steps done and the checkpoint of a live task', async () => {
    const { client, admin } = await setUp('steps-status', { maxRuntimeMs: 0 });
    await emit(client, 'slow', { steps: 50, stepMs: 20 }, 's1', true);
    const status = await waitFor(async () => {
      const task = await admin.getTask('slow', 's1');
      return task.steps && task.steps.done >= 2 ? task : undefined;
    }, 'two steps done');
    expect(status).toMatchObject({ state: 'running', steps: { done: expect.any(Number) } });
  });

  it('refuses a bad step name (InvalidTaskError) and dead-letters a step result too large to store, without a retry', async () => {
    const { client } = await setUp('steps-misuse');
    await emit(client, 'misuse', 'name', 'm1');
    await emit(client, 'misuse', 'large', 'm2');
    const dead = await newestDeadLetter(redis, keys.queue('misuse'));
    expect(dead).toMatchObject({ id: 'm2', reason: 'failed', attempts: 1, error: { name: 'StepTooLargeError' } });
    await waitFor(() => seen.thrown.includes('InvalidTaskError'), 'the refused name');
    expect(seen.runAttempts.get('m2')).toEqual([1]);
    expect(await stepKeysLeft()).toEqual([]);
  });
});
