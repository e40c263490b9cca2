import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller, type LoggerService } from '@nestjs/common';
import { Ctx, EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import { firstValueFrom } from 'rxjs';
import {
  DeadLetterTaskError,
  RedisTaskAdmin,
  RedisTaskClient,
  RedisTaskContext,
  RedisTaskModule,
  RedisTaskRecordBuilder,
  RedisTaskTransport,
  RetryTaskError,
} from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { startProducer } from '../support/nest.js';
import { deleteKeys, newestDeadLetter, openRedis, redisUrl, testPrefix, waitFor } from '../support/redis.js';

/** Every line the app logs, with its level, as Nest hands it to the app's logger. */
class CapturingLogger implements LoggerService {
  readonly lines: { level: string; text: string }[] = [];
  private add(level: string, message: unknown, rest: unknown[]): void {
    // Nest passes the context (the logger's name) last; a stack, when logged, comes as a string or in an Error.
    const parts = [message, ...rest.slice(0, -1)].map((part) =>
      part instanceof Error ? `${part.message}\n${part.stack}` : String(part),
    );
    this.lines.push({ level, text: parts.join(' ') });
  }
  log(message: unknown, ...rest: unknown[]): void {
    this.add('log', message, rest);
  }
  error(message: unknown, ...rest: unknown[]): void {
    this.add('error', message, rest);
  }
  warn(message: unknown, ...rest: unknown[]): void {
    this.add('warn', message, rest);
  }
  debug(message: unknown, ...rest: unknown[]): void {
    this.add('debug', message, rest);
  }
  verbose(message: unknown, ...rest: unknown[]): void {
    this.add('verbose', message, rest);
  }
  about(text: string): { level: string; text: string }[] {
    return this.lines.filter((line) => line.text.includes(text));
  }
}

let release: () => void = () => undefined;
let slowStarted: () => void = () => undefined;
let cancellableStarted: (id: string) => void = () => undefined;

@Controller()
class Handlers {
  @EventPattern<string>('mail.retry-throw')
  retryByThrowing(@Ctx() ctx: RedisTaskContext): void {
    if (ctx.getAttempt() === 1) throw new RetryTaskError('greylisted by the server', { delayMs: 10 });
  }

  @EventPattern<string>('mail.retry-ctx')
  retryByContext(@Ctx() ctx: RedisTaskContext): void {
    if (ctx.getAttempt() === 1) ctx.retry({ delayMs: 10 });
  }

  @EventPattern<string>('mail.reject-ctx')
  rejectByContext(@Ctx() ctx: RedisTaskContext): void {
    ctx.deadLetter('no such user');
  }

  @MessagePattern<string>('mail.reject-throw')
  rejectByThrowing(): never {
    throw new DeadLetterTaskError('mailbox closed for good');
  }

  @EventPattern<string>('mail.fail', { maxAttempts: 2, backoff: { type: 'fixed', delayMs: 10 } })
  fail(): never {
    throw new Error('smtp down');
  }

  @MessagePattern<string>('mail.undefined', { maxAttempts: 1 })
  throwUndefined(): never {
    throw undefined;
  }

  @EventPattern<string>('mail.cancellable')
  async cancellable(@Ctx() ctx: RedisTaskContext): Promise<void> {
    cancellableStarted(ctx.getTaskId());
    // What the README's handler does: wait on the signal, and rethrow why it aborted.
    await new Promise((_, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason as Error)));
  }

  @EventPattern<string>('mail.slow')
  async slow(@Payload() _: unknown): Promise<void> {
    const done = new Promise<void>((resolve) => (release = resolve));
    slowStarted();
    await done;
  }
}

const redis = openRedis();
const prefixes: string[] = [];
const closers: (() => Promise<unknown>)[] = [];

afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});

afterAll(async () => {
  for (const prefix of prefixes) await deleteKeys(redis, prefix);
  await redis.quit();
});

async function start(name: string, options: { shutdownTimeoutMs?: number; group?: string } = {}) {
  const prefix = testPrefix(name);
  prefixes.push(prefix);
  // The producer first: its testing module silences Nest's logger, which is global; the worker's comes after.
  const { client, module: producer } = await startProducer(prefix);
  const logger = new CapturingLogger();
  const module = await Test.createTestingModule({ controllers: [Handlers] }).compile();
  const transport = new RedisTaskTransport({ connection: redisUrl(), prefix, workerId: `${name}-worker`, ...options });
  const app = module.createNestMicroservice({ strategy: transport, logger });
  await app.listen();
  closers.push(
    () => producer.close(),
    () => app.close(),
  );
  return { prefix, logger, app, client, keys: new PrefixKeys(prefix) };
}

async function settledOnce(
  client: RedisTaskClient,
  pattern: string,
  logger: CapturingLogger,
  expected: RegExp,
): Promise<void> {
  await firstValueFrom(client.emit(pattern, {}));
  await waitFor(() => logger.lines.some((line) => expected.test(line.text)), `a log line matching ${expected}`);
}

describe('what the worker logs', () => {
  it('logs deliberate retries and dead letters at LOG/WARN, once, without a stack, and stores no library stack', async () => {
    const { logger, client, keys } = await start('intended-logs');
    await settledOnce(client, 'mail.retry-throw', logger, /retry-throw.*runs again in/);
    await settledOnce(client, 'mail.retry-ctx', logger, /retry-ctx.*runs again in/);
    await settledOnce(client, 'mail.reject-ctx', logger, /no such user/);
    await expect(firstValueFrom(client.send('mail.reject-throw', {}))).rejects.toThrow('mailbox closed for good');
    await waitFor(() => logger.about('mailbox closed').length > 0, 'the dead letter logged');

    expect(logger.lines.filter((line) => line.level === 'error')).toEqual([]);
    expect(logger.lines.filter((line) => /\n\s+at /.test(line.text))).toEqual([]);
    for (const said of ['greylisted by the server', 'no such user', 'mailbox closed for good']) {
      const lines = logger.about(said);
      expect(lines).toHaveLength(1);
      expect(lines[0].text.split(said)).toHaveLength(2); // the reason appears once in its line
    }
    // A dead letter the handler asked for through ctx carries no stack: the library made that error.
    const byContext = await newestDeadLetter(redis, keys.queue('mail.reject-ctx'));
    expect(byContext.detail).toBe('no such user');
    expect(byContext.error?.stack).toBeUndefined();
  });

  it('logs a failed attempt once, at WARN (its stack at debug), and a dead letter once: no second ERROR line from Nest', async () => {
    const { logger, client } = await start('failure-logs');
    await settledOnce(client, 'mail.fail', logger, /mail.fail.*moved to dead letters/);
    const said = logger.about('smtp down');
    expect(said.filter((line) => line.level !== 'debug').map((line) => line.level)).toEqual(['warn', 'warn']);
    expect(said.filter((line) => line.level !== 'debug').every((line) => !/\n\s+at /.test(line.text))).toBe(true);
    // One line each, its line breaks escaped as every log line's control characters are.
    expect(said.filter((line) => line.level === 'debug' && /\\x0a\s+at /.test(line.text))).toHaveLength(2);
    expect(logger.lines.filter((line) => line.level === 'error')).toEqual([]);
  });

  it('says that a non-Error value was thrown (`throw undefined`), to the caller and in the dead letter', async () => {
    const { logger, client, keys } = await start('undefined-thrown');
    await expect(firstValueFrom(client.send('mail.undefined', {}))).rejects.toThrow(
      'the handler threw a non-Error value (undefined)',
    );
    expect((await newestDeadLetter(redis, keys.queue('mail.undefined'))).error?.message).toBe(
      'the handler threw a non-Error value (undefined)',
    );
    expect(logger.lines.filter((line) => line.level === 'error')).toEqual([]);
  });

  it('logs a cancel of a running task as a cancel, at LOG, once: no lease-lost WARN, no ERROR for the rethrown TaskCancelledError', async () => {
    const { logger, client, keys } = await start('cancel-logs');
    const started = new Promise<string>((resolve) => (cancellableStarted = resolve));
    await firstValueFrom(client.emit('mail.cancellable', new RedisTaskRecordBuilder({}).setTracked().build()));
    const id = await started;
    await expect(
      new RedisTaskAdmin(client).cancel('mail.cancellable', id, 'the user changed their mind'),
    ).resolves.toEqual({
      cancelled: true,
      was: 'running',
    });
    await waitFor(() => logger.about('while it ran').length > 0, 'the run to end');
    const lines = logger.about(id).filter((line) => line.level !== 'debug');
    expect(lines.map((line) => line.level)).toEqual(['log', 'log']);
    expect(lines[0].text).toContain('was cancelled (the user changed their mind)');
    expect(logger.lines.filter((line) => line.level === 'error' || /lease/.test(line.text))).toEqual([]);
    expect(await redis.hget(keys.queue('mail.cancellable').counters, 'cancelled')).toBe('1');
  });

  it('warns once per pattern when a producer emits to a pattern no worker ever consumed (naming the close ones), and stats say so', async () => {
    const { prefix, client } = await start('unconsumed');
    await firstValueFrom(client.emit('mail.fail', {})); // consumed by the worker started above
    const logger = new CapturingLogger();
    const module = await Test.createTestingModule({
      imports: [RedisTaskModule.forRoot({ connection: redisUrl(), prefix, reaperIntervalMs: false })],
    }).compile();
    module.useLogger(logger);
    await module.init();
    closers.push(() => module.close());
    const producer = module.get(RedisTaskClient);
    await firstValueFrom(producer.emit('mail.fial', { n: 1 }));
    await firstValueFrom(producer.emit('mail.fial', { n: 2 }));
    await firstValueFrom(producer.emit('mail.fail', { n: 3 }));
    await waitFor(() => logger.about('mail.fial').length > 0, 'the warning');
    expect(logger.about('mail.fial')).toEqual([
      {
        level: 'warn',
        text: 'no worker has ever consumed "mail.fial" on this prefix: its tasks wait until one registers for it (did you mean "mail.fail"?)',
      },
    ]);
    expect(logger.about('consumed "mail.fail"')).toEqual([]); // a consumed pattern: not a word
    const admin = new RedisTaskAdmin(producer);
    expect((await admin.stats('mail.fial')).consumed).toBe(false);
    expect((await admin.stats('mail.fail')).consumed).toBe(true);
  });

  it('names its patterns, group, Redis and prefix when it starts, and says how long it waits for how many handlers when it stops', async () => {
    const { logger, app, client, prefix } = await start('lifecycle-logs', { shutdownTimeoutMs: 50, group: 'mailers' });
    const started = logger.about('lifecycle-logs-worker consuming');
    expect(started).toHaveLength(1);
    expect(started[0].text).toContain(
      '8 patterns "mail.retry-throw", "mail.retry-ctx", "mail.reject-ctx", "mail.reject-throw", "mail.fail", "mail.undefined", "mail.cancellable", "mail.slow"',
    );
    expect(started[0].text).toContain('group "mailers"');
    expect(started[0].text).toContain(`prefix "${prefix}"`);
    expect(started[0].text).toMatch(/from Redis at [\w.-]+:\d+/);

    const running = new Promise<void>((resolve) => (slowStarted = resolve));
    await firstValueFrom(client.emit('mail.slow', {}));
    await running;
    await app.close();
    release();
    expect(logger.about('stopping')[0]?.text).toBe(
      'worker lifecycle-logs-worker stopping: no new claims; waiting up to 50 ms for 1 running handler(s)',
    );
    expect(logger.about('still running after 50 ms')).toHaveLength(1);
    expect(logger.about('lifecycle-logs-worker stopped in')).toHaveLength(1);
  });
});
