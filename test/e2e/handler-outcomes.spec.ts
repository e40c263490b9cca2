import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { Ctx, EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { firstValueFrom } from 'rxjs';
import type { DeadLetterRecord } from '../../lib/core/model/dead-letter.js';
import { requeueProcessing } from '../../lib/core/redis/requeue.js';
import {
  DeadLetterTaskError,
  InvalidTaskError,
  LeaseLostError,
  RedisTaskContext,
  RedisTaskRecordBuilder,
  RetryTaskError,
  TaskFailedError,
  type RedisTaskClient,
  type TaskOutcomeEvent,
} from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { startProducer, startWorker, type Worker } from '../support/nest.js';
import { deleteKeys, newestDeadLetter, openRedis, testPrefix, waitFor } from '../support/redis.js';

const redis = openRedis();
const runs: { pattern: string; attempt: number; at: number }[] = [];
const refusals: string[] = [];
const invalid: string[] = [];
let openGate: () => void = () => undefined;
let gate = Promise.resolve();

function ran(pattern: string, ctx: RedisTaskContext): void {
  runs.push({ pattern, attempt: ctx.getAttempt(), at: Date.now() });
}

async function refusal(what: string, attempt: () => boolean | Promise<boolean>): Promise<void> {
  try {
    refusals.push(`${what}: ${(await attempt()) ? 'applied' : 'refused'}`);
  } catch (error) {
    refusals.push(`${what}: threw ${error instanceof LeaseLostError ? 'LeaseLostError' : String(error)}`);
  }
}

@Controller()
class Handlers {
  @EventPattern<string>('later')
  later(@Payload() p: { delayMs: number }, @Ctx() ctx: RedisTaskContext): void {
    ran('later', ctx);
    if (ctx.getAttempt() === 1) ctx.retry({ delayMs: p.delayMs });
  }

  @EventPattern<string>('always.later')
  alwaysLater(@Ctx() ctx: RedisTaskContext): void {
    ran('always.later', ctx);
    ctx.retry({ delayMs: 5 });
  }

  @EventPattern<string>('throws.retry')
  throwsRetry(@Ctx() ctx: RedisTaskContext): void {
    ran('throws.retry', ctx);
    if (ctx.getAttempt() === 1) throw new RetryTaskError('the mail server said 421', { delayMs: 20 });
  }

  @EventPattern<string>('rejects')
  rejects(@Ctx() ctx: RedisTaskContext): string {
    ran('rejects', ctx);
    ctx.deadLetter('the address does not exist');
    return 'a result that is not used';
  }

  @EventPattern<string>('throws.dead')
  throwsDead(@Ctx() ctx: RedisTaskContext): never {
    ran('throws.dead', ctx);
    throw new DeadLetterTaskError('no such account');
  }

  @EventPattern<string>('bad.requests')
  async badRequests(@Ctx() ctx: RedisTaskContext): Promise<void> {
    ran('bad.requests', ctx);
    for (const [name, call] of [
      ['retry(-1)', () => ctx.retry({ delayMs: -1 })],
      ['deadLetter("")', () => ctx.deadLetter('')],
      ['extendLease(0)', () => ctx.extendLease(0)],
    ] as const) {
      try {
        await call();
      } catch (error) {
        if (error instanceof InvalidTaskError) invalid.push(name);
      }
    }
  }

  @MessagePattern('quote.later')
  quoteLater(@Ctx() ctx: RedisTaskContext): { attempt: number } | undefined {
    ran('quote.later', ctx);
    if (ctx.getAttempt() === 1) {
      ctx.retry({ delayMs: 10 });
      return undefined;
    }
    return { attempt: ctx.getAttempt() };
  }

  @MessagePattern('quote.rejected')
  quoteRejected(@Ctx() ctx: RedisTaskContext): never {
    ran('quote.rejected', ctx);
    ctx.deadLetter('product withdrawn');
    throw new Error('this error is the cause, not what the caller gets');
  }

  @EventPattern<string>('long.work', { handlerTimeoutMs: 150 })
  async longWork(@Ctx() ctx: RedisTaskContext): Promise<void> {
    ran('long.work', ctx);
    await ctx.extendLease(5_000);
    // Work past the 150 ms handler timeout: the extension keeps the run alive.
    await new Promise((resolve) => setTimeout(resolve, 400));
    if (ctx.signal.aborted) throw new Error('aborted despite the extension');
  }

  @EventPattern<string>('fenced')
  async fenced(@Ctx() ctx: RedisTaskContext): Promise<void> {
    ran('fenced', ctx);
    if (ctx.getAttempt() > 1) return;
    await gate;
    await refusal('extendLease', () => ctx.extendLease(1_000));
    await refusal('retry', () => ctx.retry({ delayMs: 10 }));
    await refusal('deadLetter', () => ctx.deadLetter('too late'));
  }
}

let prefix = '';
let keys: PrefixKeys;
const started: { close(): Promise<unknown> }[] = [];

async function setUp(
  name: string,
  workerOptions = {},
): Promise<{ client: RedisTaskClient; worker: Worker; outcomes: TaskOutcomeEvent[] }> {
  prefix = testPrefix(name);
  keys = new PrefixKeys(prefix);
  const { client, module } = await startProducer(prefix, { replyTimeoutMs: 20_000 });
  started.push(module);
  const worker = await startWorker(prefix, [Handlers], {
    maxAttempts: 3,
    backoff: { type: 'fixed', delayMs: 10 },
    ...workerOptions,
  });
  started.push(worker.app);
  const outcomes: TaskOutcomeEvent[] = [];
  worker.transport.on('task', (event) => outcomes.push(event));
  return { client, worker, outcomes };
}

function runsOf(pattern: string) {
  return runs.filter((run) => run.pattern === pattern);
}

function deadLetter(pattern: string): Promise<DeadLetterRecord> {
  return newestDeadLetter(redis, keys.queue(pattern));
}

afterEach(async () => {
  await Promise.all(started.splice(0).map((app) => app.close()));
  await deleteKeys(redis, prefix);
  if (keys) await redis.del(keys.queues);
  runs.length = 0;
  refusals.length = 0;
  invalid.length = 0;
});

afterAll(async () => {
  await redis.quit();
});

describe('handler-decided outcomes', () => {
  it('ctx.retry({ delayMs }) runs the task again after that delay, counting the attempt', async () => {
    const { client, outcomes } = await setUp('ctx-retry');
    await firstValueFrom(client.emit('later', { delayMs: 300 }));
    // The retry waits in the delayed set, due about 300 ms after the first run (Redis clock).
    const due = await waitFor(async () => {
      const [, score] = await redis.zrange(keys.queue('later').delayed, '0', '0', 'WITHSCORES');
      return score === undefined ? undefined : Number(score);
    }, 'the retry in the delayed set');
    const [seconds, micros] = await redis.time();
    const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
    expect(due - now).toBeGreaterThan(100);
    expect(due - now).toBeLessThanOrEqual(300);
    await waitFor(() => outcomes.some((event) => event.outcome === 'completed'), 'the second run to complete');
    expect(runsOf('later').map((run) => run.attempt)).toEqual([1, 2]);
    expect(runsOf('later')[1].at - runsOf('later')[0].at).toBeGreaterThanOrEqual(250);
    expect(outcomes.map((event) => [event.outcome, event.retryInMs])).toEqual([
      ['retried', 300],
      ['completed', undefined],
    ]);
  });

  it('a retry asked for on the last attempt dead-letters the task as failed (a task cannot retry for ever)', async () => {
    await setUp('ctx-retry-last').then(({ client }) => firstValueFrom(client.emit('always.later', {})));
    const record = await deadLetter('always.later');
    expect(runsOf('always.later').map((run) => run.attempt)).toEqual([1, 2, 3]);
    expect(record).toMatchObject({
      reason: 'failed',
      attempts: 3,
      detail: 'the handler asked for a retry on the last of 3 attempt(s)',
      error: { name: 'RetryTaskError' },
    });
  });

  it('throw new RetryTaskError(message, { delayMs }) does the same', async () => {
    const { client, outcomes } = await setUp('throw-retry');
    await firstValueFrom(client.emit('throws.retry', {}));
    await waitFor(() => outcomes.some((event) => event.outcome === 'completed'), 'the second run to complete');
    expect(outcomes[0]).toMatchObject({
      outcome: 'retried',
      retryInMs: 20,
      error: { name: 'RetryTaskError', message: 'the mail server said 421', code: 'RETRY_TASK' },
    });
    expect(runsOf('throws.retry').map((run) => run.attempt)).toEqual([1, 2]);
  });

  it('ctx.deadLetter(reason) and DeadLetterTaskError dead-letter at once as rejected, with the reason; the failed counter is left alone', async () => {
    const { client } = await setUp('ctx-dead');
    await firstValueFrom(client.emit('rejects', { to: 'nobody' }));
    await firstValueFrom(client.emit('throws.dead', {}));
    const rejected = await deadLetter('rejects');
    expect(rejected).toMatchObject({
      reason: 'rejected',
      detail: 'the address does not exist',
      attempts: 1,
      payload: { to: 'nobody' },
      error: { name: 'DeadLetterTaskError', code: 'DEAD_LETTER_TASK' },
    });
    expect(await deadLetter('throws.dead')).toMatchObject({
      reason: 'rejected',
      detail: 'no such account',
      attempts: 1,
    });
    expect(runsOf('rejects')).toHaveLength(1);
    expect(await redis.hgetall(keys.queue('rejects').counters)).toEqual({ deadLettered: '1' });
  });

  it('refuses bad requests with InvalidTaskError, applying nothing', async () => {
    const { client, outcomes } = await setUp('bad-requests');
    await firstValueFrom(client.emit('bad.requests', {}));
    await waitFor(() => outcomes.length === 1, 'the run to end');
    expect(invalid).toEqual(['retry(-1)', 'deadLetter("")', 'extendLease(0)']);
    expect(outcomes[0].outcome).toBe('completed');
  });

  it("a send() caller waits through a retry the handler asked for, and gets the later run's result", async () => {
    const { client } = await setUp('send-retry');
    await expect(firstValueFrom(client.send('quote.later', {}))).resolves.toEqual({ attempt: 2 });
  });

  it('a send() caller whose handler dead-letters the task gets a TaskFailedError with the reason', async () => {
    const { client } = await setUp('send-dead');
    const error = await firstValueFrom(client.send('quote.rejected', {})).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TaskFailedError);
    expect(error).toMatchObject({
      name: 'DeadLetterTaskError',
      message: 'product withdrawn',
      code: 'DEAD_LETTER_TASK',
      reason: 'rejected',
      attempt: 1,
    });
  });

  it('ctx.extendLease(ms) moves the handler timeout for long work', async () => {
    const { client, outcomes } = await setUp('extend');
    await firstValueFrom(client.emit('long.work', {}));
    await waitFor(() => outcomes.length === 1, 'the run to end');
    expect(outcomes[0]).toMatchObject({ outcome: 'completed' });
    expect(outcomes[0].durationMs).toBeGreaterThanOrEqual(380);
  });

  it('is fenced: a run that lost its task is refused every request, and nothing is applied', async () => {
    gate = new Promise<void>((resolve) => {
      openGate = resolve;
    });
    // Heartbeats far apart: the worker has not noticed the loss when its handler asks.
    const { client, worker, outcomes } = await setUp('fenced', {
      heartbeatIntervalMs: 30_000,
      leaseMs: 60_000,
      reaperIntervalMs: false,
    });
    const queue = keys.queue('fenced');
    await firstValueFrom(client.emit('fenced', new RedisTaskRecordBuilder({}).build()));
    await waitFor(() => runsOf('fenced').length === 1, 'the first run');
    // What a reaper does once the worker's lease expired: the task goes back to its list (attempt counted).
    await requeueProcessing(
      redis,
      queue,
      { workerId: worker.transport.options.workerId, deadLetterCap: 10, resultTtlMs: 1_000 },
      { countAttempt: true },
    );
    await waitFor(() => runsOf('fenced').length === 2, 'the recovered run');
    openGate();
    await waitFor(() => refusals.length === 3, 'the three requests');
    expect(refusals).toEqual(['extendLease: refused', 'retry: refused', 'deadLetter: refused']);
    await waitFor(
      () =>
        outcomes.filter((event) => event.outcome === 'completed').length === 1 &&
        outcomes.some((event) => event.outcome === 'lease-lost'),
      'both runs to end',
    );
    expect(await redis.zcard(queue.delayed)).toBe(0);
    expect(await redis.llen(queue.deadLetters)).toBe(0);
    expect(runsOf('fenced').map((run) => run.attempt)).toEqual([1, 2]);
  });
});
