import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Catch, Controller, UseFilters, type RpcExceptionFilter } from '@nestjs/common';
import { MessagePattern, Payload, RpcException } from '@nestjs/microservices';
import { firstValueFrom, throwError, type Observable } from 'rxjs';
import type { DeadLetterRecord } from '../../lib/core/model/dead-letter.js';
import {
  RedisTaskError,
  ResultTooLargeError,
  RedisTaskRecordBuilder,
  TaskFailedError,
  type RedisTaskClient,
} from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { startProducer, startWorker } from '../support/nest.js';
import { deleteKeys, newestDeadLetter, openRedis, testPrefix, waitFor } from '../support/redis.js';

const redis = openRedis();
let ran = 0;

class QuotaError extends Error {
  readonly code = 'E_QUOTA';
  constructor(message: string) {
    super(message);
    this.name = 'QuotaError';
  }
}

@Catch()
class MaskingFilter implements RpcExceptionFilter {
  catch(): Observable<never> {
    return throwError(() => ({ status: 'error', message: 'masked by the app', code: 'E_MASKED' }));
  }
}

@Controller()
class Handlers {
  @MessagePattern('big.result')
  bigResult(@Payload() size: number): string {
    ran++;
    return 'x'.repeat(size);
  }

  @MessagePattern('quota')
  quota(@Payload() p: { user: string }): never {
    ran++;
    throw new QuotaError(`quota exceeded for ${p.user}`);
  }

  @MessagePattern('rpc.object')
  rpcObject(): never {
    throw new RpcException({ code: 'E_NO_STOCK', message: 'out of stock', sku: 'A-1', left: 0 });
  }

  @MessagePattern('masked')
  @UseFilters(new MaskingFilter())
  masked(): never {
    throw new Error('a detail the app does not want to send');
  }

  @MessagePattern('runs')
  runs(): string {
    ran++;
    return 'ran';
  }
}

let prefix = '';
const started: { close(): Promise<unknown> }[] = [];

async function setUp(name: string, workerOptions = {}): Promise<{ client: RedisTaskClient; keys: PrefixKeys }> {
  prefix = testPrefix(name);
  const { client, module } = await startProducer(prefix, { replyTimeoutMs: 20_000 });
  started.push(module);
  const worker = await startWorker(prefix, [Handlers], {
    maxAttempts: 2,
    backoff: { type: 'fixed', delayMs: 10 },
    ...workerOptions,
  });
  started.push(worker.app);
  return { client, keys: new PrefixKeys(prefix) };
}

async function failure(observable: Observable<unknown>): Promise<TaskFailedError> {
  const error = await firstValueFrom(observable).then(
    (value) => {
      throw new Error(`expected a failure, got ${JSON.stringify(value)}`);
    },
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(TaskFailedError);
  return error as TaskFailedError;
}

function deadLetter(keys: PrefixKeys, pattern: string): Promise<DeadLetterRecord> {
  return newestDeadLetter(redis, keys.queue(pattern));
}

afterEach(async () => {
  await Promise.all(started.splice(0).map((app) => app.close()));
  await deleteKeys(redis, prefix);
  ran = 0;
});

afterAll(async () => {
  await redis.quit();
});

describe('errors that keep their type across the transport', () => {
  it('completes a task whose result is over maxResultBytes, stores and publishes none of it, and gives the send() caller ResultTooLargeError', async () => {
    const { client, keys } = await setUp('big-result', { maxResultBytes: 10_000 });
    expect(await firstValueFrom(client.send('big.result', 9_000))).toHaveLength(9_000);
    const error = await firstValueFrom(client.send('big.result', 50_000)).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(ResultTooLargeError);
    expect(error).toMatchObject({ code: 'RESULT_TOO_LARGE', pattern: 'big.result', limit: 10_000 });
    expect((error as ResultTooLargeError).bytes).toBeGreaterThan(50_000);
    expect(ran).toBe(2); // not run again: its work was done
    const queue = keys.queue('big.result');
    await waitFor(async () => (await redis.hget(queue.counters, 'completed')) === '2', 'both tasks completed');
    expect(await redis.hget(queue.counters, 'deadLettered')).toBeNull();
    const results = await Promise.all(
      (await redis.keys(`${queue.root}:result:*`)).map(async (key) => (await redis.strlen(key)) as number),
    );
    expect(Math.max(...results)).toBeLessThan(10_000);
  });

  it("gives a send() caller an Error with the handler error's name, message and code, the task id and attempt, and no stack", async () => {
    const { client, keys } = await setUp('typed-error');
    const error = await failure(client.send('quota', { user: 'ann' }));
    expect(error).toBeInstanceOf(Error);
    expect(error).toBeInstanceOf(RedisTaskError);
    expect(error).toMatchObject({
      name: 'QuotaError',
      message: 'quota exceeded for ann',
      code: 'E_QUOTA',
      pattern: 'quota',
      attempt: 2,
      reason: 'failed',
    });
    expect(error.remoteStack).toBeUndefined();
    expect(ran).toBe(2);
    // The dead letter stores the same structured error (with its stack head).
    const record = await deadLetter(keys, 'quota');
    expect(error.taskId).toBe(record.id);
    expect(record.error).toMatchObject({ name: 'QuotaError', message: 'quota exceeded for ann', code: 'E_QUOTA' });
    expect(record.error?.stack?.split('\n')[0]).toBe('QuotaError: quota exceeded for ann');
  });

  it("carries an RpcException's payload as data (Nest's convention), its code lifted from it", async () => {
    const { client, keys } = await setUp('rpc-payload');
    const error = await failure(client.send('rpc.object', {}));
    expect(error).toMatchObject({
      name: 'RpcException',
      message: 'out of stock',
      code: 'E_NO_STOCK',
      data: { code: 'E_NO_STOCK', message: 'out of stock', sku: 'A-1', left: 0 },
    });
    expect((await deadLetter(keys, 'rpc.object')).error).toMatchObject({ name: 'RpcException', data: { sku: 'A-1' } });
  });

  it("sends what the app's own exception filter emitted, not the error it masked", async () => {
    const { client } = await setUp('filtered');
    const error = await failure(client.send('masked', {}));
    expect(error).toMatchObject({
      message: 'masked by the app',
      code: 'E_MASKED',
      data: { status: 'error', message: 'masked by the app', code: 'E_MASKED' },
    });
    expect(JSON.stringify({ ...error, message: error.message })).not.toContain('does not want');
  });

  it('sends the stack head only with sendErrorStack', async () => {
    const { client } = await setUp('with-stack', { sendErrorStack: true });
    const error = await failure(client.send('quota', { user: 'bob' }));
    expect(error.remoteStack?.split('\n')[0]).toBe('QuotaError: quota exceeded for bob');
  });

  it('fails a send() whose task expired before a worker took it with TASK_EXPIRED (it used to complete with no value)', async () => {
    prefix = testPrefix('expired-send');
    const { client, module } = await startProducer(prefix, { replyTimeoutMs: 20_000 });
    started.push(module);
    // Long enough for the send to be enqueued on a loaded machine (one whose expiry has passed by then is refused
    // with InvalidTaskError, CI found): it is known enqueued before the expiry is waited for.
    const expiresAt = Date.now() + 1_500;
    const answer = failure(client.send('runs', new RedisTaskRecordBuilder({}).setExpiresAt(expiresAt).build()));
    await waitFor(
      async () => (await redis.exists(new PrefixKeys(prefix).queue('runs').ring)) === 1,
      'the task to be enqueued',
    );
    expect(Date.now()).toBeLessThan(expiresAt);
    await waitFor(() => Date.now() > expiresAt, 'the task to expire');
    const worker = await startWorker(prefix, [Handlers]);
    started.push(worker.app);
    const error = await answer;
    expect(error).toMatchObject({ name: 'ExpiredError', code: 'TASK_EXPIRED', reason: 'expired', attempt: 0 });
    expect(ran).toBe(0);
  });
});
