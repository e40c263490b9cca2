import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { Ctx, EventPattern, MessagePattern, Payload, RpcException } from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import { firstValueFrom } from 'rxjs';
import type { DeadLetterRecord } from '../../lib/core/model/dead-letter.js';
import { gatewayOf } from '../../lib/core/redis/gateway.js';
import type { QueueKeys } from '../../lib/core/redis/keys.js';
import { requeueProcessing } from '../../lib/core/redis/requeue.js';
import { TaskReaper } from '../../lib/core/reaper/reaper.js';
import {
  InvalidOptionError,
  NonRetryableTaskError,
  RedisTaskAdmin,
  RedisTaskClient,
  RedisTaskContext,
  RedisTaskModule,
  RedisTaskReaper,
  RedisTaskRecordBuilder,
  RedisTaskTransport,
  TaskFailedError,
  UnserializableResultError,
} from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { startWorker, type Worker } from '../support/nest.js';
import { claimAs, deleteKeys, keysUnder, openRedis, redisUrl, testPrefix, waitFor } from '../support/redis.js';

const redis = openRedis();
const runs: { pattern: string; n: number; attempt: number; maxAttempts: number }[] = [];
const aborted: string[] = [];
let failUntil = 0;

@Controller()
class Flaky {
  @EventPattern<string>('flaky')
  flaky(@Payload() p: { n: number }, @Ctx() ctx: RedisTaskContext): void {
    runs.push({ pattern: 'flaky', n: p.n, attempt: ctx.getAttempt(), maxAttempts: ctx.getMaxAttempts() });
    if (ctx.getAttempt() < failUntil) {
      throw new Error(`flaky failure on attempt ${ctx.getAttempt()}`);
    }
  }

  @EventPattern<string>('always.fails')
  alwaysFails(@Payload() p: { n: number }, @Ctx() ctx: RedisTaskContext): void {
    runs.push({ pattern: 'always.fails', n: p.n, attempt: ctx.getAttempt(), maxAttempts: ctx.getMaxAttempts() });
    if (!(p as { heal?: boolean }).heal && !healed) {
      throw new RangeError(`cannot process ${p.n}`);
    }
  }

  @EventPattern<string>('bad.input')
  badInput(@Payload() p: { n: number }, @Ctx() ctx: RedisTaskContext): void {
    runs.push({ pattern: 'bad.input', n: p.n, attempt: ctx.getAttempt(), maxAttempts: ctx.getMaxAttempts() });
    throw new NonRetryableTaskError('the avatar file is not an image');
  }

  @EventPattern<string>('twice', { maxAttempts: 2, backoff: { type: 'fixed', delayMs: 10 } })
  twice(@Payload() p: { n: number }, @Ctx() ctx: RedisTaskContext): void {
    runs.push({ pattern: 'twice', n: p.n, attempt: ctx.getAttempt(), maxAttempts: ctx.getMaxAttempts() });
    throw new Error('never works');
  }

  @MessagePattern('quote')
  quote(@Payload() p: { n: number }, @Ctx() ctx: RedisTaskContext): never {
    runs.push({ pattern: 'quote', n: p.n, attempt: ctx.getAttempt(), maxAttempts: ctx.getMaxAttempts() });
    // RpcException: Nest passes its message to the caller (other errors reach it as "Internal server error").
    throw new RpcException(`no quote for product ${p.n}`);
  }

  @EventPattern<string>('waits.for.abort')
  async waitsForAbort(@Payload() p: { n: number }, @Ctx() ctx: RedisTaskContext): Promise<void> {
    runs.push({ pattern: 'waits.for.abort', n: p.n, attempt: ctx.getAttempt(), maxAttempts: ctx.getMaxAttempts() });
    if (ctx.getAttempt() === 1) {
      await new Promise<void>((resolve) => ctx.getSignal().addEventListener('abort', () => resolve(), { once: true }));
      aborted.push(ctx.getTaskId());
    }
  }

  @EventPattern<string>('noop')
  noop(): void {}

  @MessagePattern('bigint.result')
  bigintResult(@Payload() p: { n: number }, @Ctx() ctx: RedisTaskContext): { total: bigint } {
    runs.push({ pattern: 'bigint.result', n: p.n, attempt: ctx.getAttempt(), maxAttempts: ctx.getMaxAttempts() });
    return { total: 10n };
  }

  @MessagePattern('circular.rpc.error')
  circularRpcError(): never {
    const detail: Record<string, unknown> = { code: 'E_CIRCULAR' };
    detail.self = detail;
    throw new RpcException(detail);
  }

  @EventPattern<string>('never.settles', {
    handlerTimeoutMs: 150,
    maxAttempts: 2,
    backoff: { type: 'fixed', delayMs: 10 },
  })
  async neverSettles(@Payload() p: { n: number }, @Ctx() ctx: RedisTaskContext): Promise<void> {
    runs.push({ pattern: 'never.settles', n: p.n, attempt: ctx.getAttempt(), maxAttempts: ctx.getMaxAttempts() });
    await new Promise<void>((resolve) =>
      ctx.getSignal().addEventListener('abort', () => {
        aborted.push(`${ctx.getTaskId()}:${(ctx.getSignal().reason as Error).name}`);
        resolve();
      }),
    );
    await new Promise<void>(() => undefined); // ignores the signal: only the timeout frees the slot
  }
}

let healed = false;
let prefix = '';
let keys: PrefixKeys;
const started: { close(): Promise<unknown> }[] = [];

const fastRetries = { backoff: { type: 'fixed' as const, delayMs: 20 }, reaperIntervalMs: 50 };

async function worker(options = {}): Promise<Worker> {
  const w = await startWorker(prefix, [Flaky], { ...fastRetries, ...options });
  started.push(w.app);
  return w;
}

async function module(options = {}) {
  const m = await Test.createTestingModule({
    imports: [RedisTaskModule.forRoot({ connection: redisUrl(), prefix, reaperIntervalMs: false, ...options })],
  }).compile();
  m.useLogger(false);
  await m.init();
  started.push(m);
  return { client: m.get(RedisTaskClient), admin: m.get(RedisTaskAdmin), reaper: m.get(RedisTaskReaper) };
}

function fresh(name: string): void {
  prefix = testPrefix(name);
  keys = new PrefixKeys(prefix);
}

/**
 * A worker that claims `count` tasks while its lease is live, then dies: its lease runs out (the claim
 * script refuses a worker whose lease has already expired).
 */
async function claimThenDie(
  queue: QueueKeys,
  workerId: string,
  count: number,
): Promise<string[] | 'unregistered' | 'paused'> {
  await gatewayOf(redis).heartbeat(queue, workerId, 60_000);
  const claimed = await claimAs(redis, queue, workerId, count);
  await redis.zadd(queue.workers, '1', workerId);
  return claimed;
}

function runsOf(pattern: string) {
  return runs.filter((run) => run.pattern === pattern);
}

async function deadLetters(pattern: string, count: number): Promise<DeadLetterRecord[]> {
  return waitFor(async () => {
    const list = await redis.lrange(keys.queue(pattern).deadLetters, 0, -1);
    return list.length === count ? list.map((raw) => JSON.parse(raw) as DeadLetterRecord) : undefined;
  }, `${count} dead letter(s) of ${pattern}`);
}

afterEach(async () => {
  await Promise.all(started.splice(0).map((app) => app.close()));
  await deleteKeys(redis, prefix);
  if (keys) await redis.del(keys.queues);
  runs.length = 0;
  aborted.length = 0;
  healed = false;
  failUntil = 0;
});

afterAll(async () => {
  await redis.quit();
});

describe('retries', () => {
  it('retries a throwing handler through the delayed set until it succeeds', async () => {
    fresh('retry');
    failUntil = 3;
    const { client } = await module();
    await worker({ maxAttempts: 5, backoff: { type: 'fixed', delayMs: 300 } });
    await firstValueFrom(client.emit('flaky', { n: 1 }));
    await waitFor(() => runsOf('flaky').length === 1, 'the first run');
    // Between attempts the task waits in Redis (the delayed set), not in worker memory.
    await waitFor(async () => (await redis.zcard(keys.queue('flaky').delayed)) === 1, 'the retry in the delayed set');
    await waitFor(() => runsOf('flaky').length === 3, 'three runs');
    expect(runsOf('flaky').map((run) => run.attempt)).toEqual([1, 2, 3]);
    expect(runsOf('flaky').every((run) => run.maxAttempts === 5)).toBe(true);
    await waitFor(
      async () =>
        (await keysUnder(redis, prefix)).every((key) =>
          /:(workers|heartbeats|groups|sequence|shards|counters|history|pending-count|queues|sweep-turn)$/.test(key),
        ),
      'nothing left but the registry',
      // The emit's record (a mark of the producer's calls): enqueueTimeoutMs (5 s) and 12 s more at most.
      { timeoutMs: 20_000 },
    );
    expect(await redis.llen(keys.queue('flaky').deadLetters)).toBe(0);
  });

  it('dead-letters a task that always throws after exactly maxAttempts, with its error; a requeued dead letter runs again', async () => {
    fresh('exhaust');
    const { client, admin } = await module();
    await worker({ maxAttempts: 3 });
    const { id } = await firstValueFrom(client.emit('always.fails', { n: 7 }));
    const [record] = await deadLetters('always.fails', 1);
    expect(runsOf('always.fails').map((run) => run.attempt)).toEqual([1, 2, 3]);
    expect(record).toMatchObject({
      id,
      pattern: 'always.fails',
      clientId: 'default',
      reason: 'failed',
      attempts: 3,
      payload: { n: 7 },
      error: { name: 'RangeError', message: 'cannot process 7' },
    });
    expect(record.error?.stack?.split('\n')[0]).toBe('RangeError: cannot process 7');
    expect(record.deadAt).toBeGreaterThanOrEqual(record.enqueuedAt ?? Infinity);

    healed = true;
    runs.length = 0;
    expect(await admin.requeueDeadLetters('always.fails', { ids: [id as string] })).toEqual({
      requeued: 1,
      skipped: 0,
    });
    await waitFor(() => runsOf('always.fails').length === 1, 'the requeued run');
    expect(runsOf('always.fails')[0].attempt).toBe(1); // attempts reset
    expect(await admin.countDeadLetters('always.fails')).toBe(0);
  });

  it('dead-letters a NonRetryableTaskError at once', async () => {
    fresh('nonretry');
    const { client } = await module();
    await worker({ maxAttempts: 5 });
    await firstValueFrom(client.emit('bad.input', { n: 1 }));
    const [record] = await deadLetters('bad.input', 1);
    expect(runsOf('bad.input')).toHaveLength(1);
    expect(record).toMatchObject({
      reason: 'failed',
      attempts: 1,
      detail: 'non-retryable error',
      error: { message: 'the avatar file is not an image' },
    });
  });

  it("takes attempts and backoff from the pattern's extras, and a record's own setting over both", async () => {
    fresh('layers');
    const { client } = await module();
    await worker({ maxAttempts: 5 });
    await firstValueFrom(client.emit('twice', { n: 1 }));
    await deadLetters('twice', 1);
    expect(runsOf('twice').map((run) => [run.attempt, run.maxAttempts])).toEqual([
      [1, 2],
      [2, 2],
    ]);

    runs.length = 0;
    await firstValueFrom(
      client.emit(
        'twice',
        new RedisTaskRecordBuilder({ n: 2 }).setMaxAttempts(4).setBackoff({ type: 'fixed', delayMs: 5 }).build(),
      ),
    );
    await deadLetters('twice', 2);
    expect(runsOf('twice').map((run) => run.attempt)).toEqual([1, 2, 3, 4]);
  });

  it('gives a send() caller the final error once the attempts are used up (not a timeout)', async () => {
    fresh('senderror');
    const { client } = await module({ replyTimeoutMs: 30_000 });
    await worker({ maxAttempts: 2 });
    await expect(firstValueFrom(client.send('quote', { n: 1 }))).rejects.toMatchObject({
      message: 'no quote for product 1',
    });
    expect(runsOf('quote').map((run) => run.attempt)).toEqual([1, 2]);
  });
});

describe('dead letters', () => {
  it('are capped, oldest dropped first; can be listed and purged by id and all', async () => {
    fresh('cap');
    const { client, admin } = await module();
    await worker({ deadLetterCap: 3 });
    const ids = (
      await client.emitBatch(
        'bad.input',
        [1, 2, 3, 4, 5].map((n) => ({ n })),
      )
    ).map((receipt) => receipt.id);
    await waitFor(() => runsOf('bad.input').length === 5, 'five runs');
    const list = await waitFor(async () => {
      const records = await admin.listDeadLetters('bad.input');
      return records.length === 3 && runsOf('bad.input').length === 5 ? records : undefined;
    }, 'three capped dead letters');
    expect(list.map((record) => record.id).sort()).toEqual(expect.arrayContaining([]));
    expect(new Set(list.map((record) => record.id)).size).toBe(3);
    expect(list.every((record) => ids.includes(record.id as string))).toBe(true);
    expect(await admin.purgeDeadLetters('bad.input', { ids: [list[0].id as string] })).toBe(1);
    expect(await admin.countDeadLetters('bad.input')).toBe(2);
    expect(await admin.purgeDeadLetters('bad.input', 'all')).toBe(2);
    expect(await admin.countDeadLetters('bad.input')).toBe(0);
    expect(await admin.queues()).toEqual(expect.arrayContaining(['bad.input', 'flaky']));
  });
});

describe('leases and recovery', () => {
  it("RedisTaskReaper.sweep() returns a dead worker's tasks to the head of their list, attempt counted", async () => {
    fresh('reap');
    const { client, reaper } = await module();
    await client.emitBatch('noop', [{ n: 1 }, { n: 2 }, { n: 3 }]);
    const queue = keys.queue('noop');
    await redis.sadd(keys.queues, 'noop');
    // A worker claimed two tasks and died: its lease expired long ago.
    const claimed = await claimThenDie(queue, 'dead-worker', 2);
    expect(claimed).toHaveLength(4);

    const result = await reaper.sweep();
    expect(result).toMatchObject({ recovered: 2, promoted: 0, deadLettered: 0, workersRemoved: 1 });
    expect(await redis.exists(queue.processing('dead-worker'))).toBe(0);
    expect(await redis.zscore(queue.workers, 'dead-worker')).toBeNull();
    const pending = await redis.lrange(queue.pending('default'), 0, -1);
    expect(pending.map((raw) => raw.split('|')[0])).toEqual(['1', '1', '0']);
    expect(JSON.parse(pending[0].slice(2)).payload).toEqual({ n: 1 });
    expect(await reaper.sweep()).toMatchObject({ recovered: 0, workersRemoved: 0 }); // nothing twice
  });

  it('a shard that cannot be swept leaves the others swept, and its error is thrown after them', async () => {
    fresh('reap-isolated');
    const { client } = await module();
    await client.emitBatch('noop', [{ n: 1 }, { n: 2 }]);
    const queue = keys.queue('noop');
    await redis.sadd(keys.queues, 'noop', 'a-broken');
    // "a-broken" sorts first: its flow events hold a stray string, so folding them fails at every sweep.
    await redis.set(keys.queue('a-broken').flowEvents, 'stray');
    await claimThenDie(queue, 'dead-worker', 2);
    // Swept in the order given: the broken shard first.
    const core = TaskReaper.forPrefix(redis, prefix);
    await expect(core.sweep(['a-broken', 'noop'])).rejects.toThrow(/WRONGTYPE/);
    // The shard after the broken one was swept all the same: the dead worker's tasks are back.
    expect(await redis.exists(queue.processing('dead-worker'))).toBe(0);
    expect(await redis.llen(queue.pending('default'))).toBe(2);
  });

  it("a worker's built-in reaper recovers a dead worker's tasks with no other wiring", async () => {
    fresh('builtin');
    const { client } = await module();
    await client.emitBatch('flaky', [{ n: 1 }, { n: 2 }]);
    const queue = keys.queue('flaky');
    await claimThenDie(queue, 'crashed', 2);
    await worker();
    await waitFor(() => runsOf('flaky').length === 2, 'both recovered tasks');
    expect(runsOf('flaky').map((run) => run.attempt)).toEqual([2, 2]);
  });

  it('fires the AbortSignal of a handler whose lease was lost, refuses its late outcome, and runs the task again', async () => {
    fresh('abort');
    const { client, reaper } = await module();
    const w = await worker({ heartbeatIntervalMs: 20, leaseMs: 60_000, reaperIntervalMs: false });
    const workerId = w.transport.options.workerId;
    const queue = keys.queue('waits.for.abort');
    await firstValueFrom(client.emit('waits.for.abort', { n: 1 }));
    await waitFor(() => runsOf('waits.for.abort').length === 1, 'the first run');
    // What a reaper does once this worker's lease has expired (after a long pause, say): its task goes
    // back to its list. The live worker must notice at its next heartbeat.
    const recovered = await requeueProcessing(
      redis,
      queue,
      { workerId, deadLetterCap: 10, resultTtlMs: 1_000 },
      { countAttempt: true },
    );
    expect(recovered).toEqual({ requeued: 1, malformed: 0 });
    expect(reaper).toBeInstanceOf(RedisTaskReaper);
    await waitFor(() => aborted.length === 1, 'the abort signal');
    await waitFor(() => runsOf('waits.for.abort').length === 2, 'the second run');
    expect(runsOf('waits.for.abort').map((run) => run.attempt)).toEqual([1, 2]);
    await waitFor(
      async () => (await redis.hlen(queue.processing(w.transport.options.workerId))) === 0,
      'the second run to be acknowledged',
    );
    expect(await redis.llen(queue.pending('default'))).toBe(0);
  });

  it('dead-letters, as "interrupted", a task whose every run was cut short', async () => {
    fresh('interrupted');
    const { client } = await module();
    await client.emit('flaky', new RedisTaskRecordBuilder({ n: 1 }).setMaxAttempts(2).build()).toPromise();
    const queue = keys.queue('flaky');
    await redis.sadd(keys.queues, 'flaky');
    for (const dead of ['crash-1', 'crash-2']) {
      await claimThenDie(queue, dead, 1);
      await (await module()).reaper.sweep();
    }
    await worker();
    const [record] = await deadLetters('flaky', 1);
    expect(record).toMatchObject({ reason: 'interrupted', attempts: 2, payload: { n: 1 } });
    expect(runsOf('flaky')).toHaveLength(0);
  });
});

describe('bounded memory', () => {
  it('returns to the baseline key count after 10,000 tasks', async () => {
    fresh('memory');
    const { client } = await module();
    await worker({ concurrency: 16 });
    await firstValueFrom(client.emit('noop', { warmup: true }));
    const queue = keys.queue('noop');
    await waitFor(
      async () => (await redis.hget(queue.counters, 'completed')) === '1',
      'the warm-up task to be acknowledged',
    );
    // The per-minute history appears at a reaper's sweep, whenever that comes; it is bounded (an hour of minutes).
    // So do the enqueue calls' records and the mark of a connection's calls (kept for the call's TTL,
    // enqueueTimeoutMs + 10 s, and the mark 2 s more, so a resend finds them).
    const lasting = async () =>
      (await keysUnder(redis, prefix))
        // The reapers' sweep turn lives while they run (WIRE-FORMAT): not the tasks' keys.
        .filter((key) => !key.endsWith(':history') && !key.includes(':call:') && !key.endsWith(':sweep-turn'))
        .sort();
    const baseline = await lasting();
    for (let i = 0; i < 10; i++) {
      await client.emitBatch(
        'noop',
        Array.from({ length: 1_000 }, (_, n) =>
          new RedisTaskRecordBuilder({ n }).setClientId(`tenant-${n % 7}`).build(),
        ),
      );
    }
    await waitFor(async () => (await lasting()).join() === baseline.join(), 'the key count to return to its baseline', {
      timeoutMs: 60_000,
      intervalMs: 100,
    });
    // What stays: the list of patterns, each pattern's worker registry and heartbeats, shard count, outcome and claim counters (and their per-minute history), the pending count; nothing per task.
    expect(
      baseline.every((key) => /:(workers|heartbeats|groups|sequence|shards|counters|pending-count|queues)$/.test(key)),
    ).toBe(true);
    const records = (await keysUnder(redis, prefix)).filter((key) => key.includes(':call:'));
    const ttls = await Promise.all(records.map((key) => redis.pttl(key)));
    expect(ttls.every((ttl) => ttl > 0 && ttl <= 17_000)).toBe(true);
  }, 120_000);
});

describe('bad options', () => {
  it('refuses a heartbeat that is not at most half the lease, naming heartbeatIntervalMs', () => {
    expect(() => new RedisTaskTransport({ heartbeatIntervalMs: 6_000, leaseMs: 10_000 })).toThrow(
      /option "heartbeatIntervalMs"/,
    );
  });

  it('refuses bad backoff and attempts, naming the option', () => {
    expect(() => new RedisTaskTransport({ backoff: { type: 'linear' } as never })).toThrow(/option "backoff.type"/);
    expect(() => new RedisTaskTransport({ maxAttempts: 0 })).toThrow(InvalidOptionError);
    expect(() => new RedisTaskRecordBuilder({}).setMaxAttempts(-1)).toThrow(/setMaxAttempts\(\)/);
    expect(() => new RedisTaskRecordBuilder({}).setBackoff({ type: 'fixed', delayMs: -5 })).toThrow(/delayMs/);
  });

  it('refuses bad retry extras on a pattern at start-up, naming the pattern', async () => {
    fresh('extras');
    @Controller()
    class BadExtras {
      @EventPattern<string>('oops', { maxAttempts: 'many' })
      oops(): void {}
    }
    await expect(startWorker(prefix, [BadExtras])).rejects.toThrow(/extras of pattern "oops".maxAttempts/);
  });

  it('refuses bad durable-step extras on a pattern at start-up, naming the pattern and the extra', async () => {
    fresh('step-extras');
    @Controller()
    class BadStepExtras {
      @EventPattern<string>('steps.oops', { stepAttempts: 0 })
      oops(): void {}
    }
    await expect(startWorker(prefix, [BadStepExtras])).rejects.toThrow(/extras of pattern "steps.oops".stepAttempts/);
    @Controller()
    class BadRuntime {
      @EventPattern<string>('steps.long', { maxRuntimeMs: -1 })
      long(): void {}
    }
    await expect(startWorker(prefix, [BadRuntime])).rejects.toThrow(/extras of pattern "steps.long".maxRuntimeMs/);
  });

  it("refuses a concurrency extra above the worker's concurrency at start-up, naming the pattern and the value", async () => {
    fresh('extras-concurrency');
    @Controller()
    class TooMany {
      @EventPattern<string>('encode', { concurrency: 12 })
      encode(): void {}
    }
    await expect(startWorker(prefix, [TooMany], { concurrency: 8 })).rejects.toThrow(
      /extras of pattern "encode".concurrency.*more than the worker's concurrency \(8\)/,
    );
  });
});

describe('results and errors that cannot be serialized, handlers that never settle', () => {
  it('completes a task whose send() result cannot be JSON (a BigInt): the work is done, the caller gets UnserializableResultError naming where the value is', async () => {
    fresh('bigint-result');
    const { client } = await module();
    await worker();
    const error = await firstValueFrom(client.send('bigint.result', { n: 1 })).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UnserializableResultError);
    expect(error).toMatchObject({
      code: 'UNSERIALIZABLE_RESULT',
      pattern: 'bigint.result',
      message: expect.stringContaining(
        'the result of the "bigint.result" handler cannot be serialized to JSON (result.total (a BigInt)',
      ),
    });
    const queue = keys.queue('bigint.result');
    await waitFor(async () => (await redis.hget(queue.counters, 'completed')) === '1', 'the task counted completed');
    // Not failed: nothing to requeue (which would only run its side effects again).
    expect(await redis.llen(queue.deadLetters)).toBe(0);
    expect(runsOf('bigint.result')).toHaveLength(1);
    await waitFor(async () => (await redis.zrange(queue.workers, '0', '-1')).length === 1, 'the worker registry');
    const [workerId] = await redis.zrange(queue.workers, '0', '-1');
    expect(await redis.hlen(queue.processing(workerId))).toBe(0);
  });

  it('sends the caller a safe error record when an RpcException carries a circular object', async () => {
    fresh('circular-rpc');
    const { client } = await module();
    await worker({ maxAttempts: 1 });
    const error = await firstValueFrom(client.send('circular.rpc.error', {})).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TaskFailedError);
    expect((error as TaskFailedError).name).toBe('RpcException');
    expect((error as TaskFailedError).data).toMatch(/not serializable: circular/);
    await deadLetters('circular.rpc.error', 1);
  });

  it('abandons a handler past handlerTimeoutMs: its signal aborts with HandlerTimeoutError, the slot frees, and it ends in dead letters as timeout', async () => {
    fresh('timeout');
    const { client } = await module();
    const w = await worker({ concurrency: 1 });
    const outcomes: string[] = [];
    w.transport.on('task', (event) => outcomes.push(`${event.outcome}:${event.reason ?? ''}`));
    await firstValueFrom(client.emit('never.settles', { n: 1 }));
    const [record] = await deadLetters('never.settles', 1);
    expect(record).toMatchObject({ reason: 'timeout', attempts: 2, error: { name: 'HandlerTimeoutError' } });
    expect(runsOf('never.settles').map((run) => run.attempt)).toEqual([1, 2]);
    expect(aborted.filter((entry) => entry.endsWith(':HandlerTimeoutError'))).toHaveLength(2);
    await waitFor(() => outcomes.length === 2, 'both outcome events');
    expect(outcomes).toEqual(['retried:', 'dead-lettered:timeout']);
    // With concurrency 1, a second task still runs: the abandoned handlers hold no slot.
    await firstValueFrom(client.emit('noop', {}));
    await waitFor(
      async () => (await redis.hget(keys.queue('noop').counters, 'completed')) === '1',
      'the next task to run',
    );
  });
});

describe('request/reply mistakes', () => {
  it('fails a send() to a pattern handled by an @EventPattern with a clear error instead of resolving null', async () => {
    fresh('send-to-event');
    const { client } = await module();
    await worker();
    const error = await firstValueFrom(client.send('noop', {})).catch((e: unknown) => e);
    expect(String((error as { message?: string }).message)).toContain('"noop" is handled by an @EventPattern');
    const [record] = await deadLetters('noop', 1);
    expect(record).toMatchObject({ reason: 'failed', attempts: 1 });
  });
});

describe('send() that times out', () => {
  it('leaves its task queued by default, and with cancelOnReplyTimeout removes it when no worker has started it', async () => {
    fresh('send-timeout');
    const { client } = await module({ replyTimeoutMs: 150 });
    const kept = await firstValueFrom(client.send('nobody.handles', { n: 1 })).catch((e: unknown) => e);
    expect(kept).toMatchObject({
      name: 'ReplyTimeoutError',
      cancelled: false,
      message: expect.stringContaining('may still run later'),
    });
    const queue = keys.queue('nobody.handles');
    expect(await redis.llen(queue.pending('default'))).toBe(1);

    const cancelling = await module({ replyTimeoutMs: 150, cancelOnReplyTimeout: true });
    for (const priority of [0, 5]) {
      const record = new RedisTaskRecordBuilder({ n: 2 })
        .setPriority(priority)
        .setDeduplicationKey(`quote-${priority}`)
        .build();
      const error = await firstValueFrom(cancelling.client.send('nobody.handles', record)).catch((e: unknown) => e);
      expect(error).toMatchObject({ name: 'ReplyTimeoutError', cancelled: true });
      expect(await redis.exists(queue.dedup(`quote-${priority}`))).toBe(0);
    }
    // Only the first, uncancelled task is still waiting.
    expect(await redis.llen(queue.pending('default'))).toBe(1);
    expect(await redis.zcard(queue.priority('default'))).toBe(0);
  });
});
