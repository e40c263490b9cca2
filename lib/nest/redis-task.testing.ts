import { randomBytes } from 'node:crypto';
import type { DynamicModule, INestMicroservice, ModuleMetadata, Type } from '@nestjs/common';
import { Test, type TestingModule } from '@nestjs/testing';
import { deletePrefixAt, type DeletedPrefix } from '../core/admin/prefix-cleanup.js';
import { defaultConnection, type RedisTaskTransportOptions } from '../core/config/options.js';
import { nameProblem } from '../core/config/rules.js';
import { InvalidOptionError } from '../core/model/errors.js';
import { RedisTaskAdmin } from './redis-task.admin.js';
import { RedisTaskClient } from './redis-task.client.js';
import { RedisTaskModule } from './redis-task.module.js';
import { RedisTaskTransport } from './redis-task.transport.js';

export interface RedisTaskTestingOptions extends Pick<ModuleMetadata, 'imports' | 'providers' | 'controllers'> {
  /** Redis to use. Default: `REDIS_URL`, else `redis://127.0.0.1:6379`. */
  readonly connection?: RedisTaskTransportOptions['connection'];
  /** Transport options (concurrency, retries, …) of the worker. */
  readonly transport?: Omit<RedisTaskTransportOptions, 'connection' | 'prefix'>;
  /** Key prefix. Default: a fresh random one, so tests never see each other's tasks. */
  readonly prefix?: string;
  /** Customise the testing module before it compiles (override providers, …). */
  readonly configure?: (
    builder: ReturnType<typeof Test.createTestingModule>,
  ) => ReturnType<typeof Test.createTestingModule>;
}

/** A worker and a producer of your own app on a real Redis, for end-to-end tests of your handlers. */
export interface RedisTaskTestingApp {
  readonly module: TestingModule;
  readonly app: INestMicroservice;
  readonly transport: RedisTaskTransport;
  readonly client: RedisTaskClient;
  readonly admin: RedisTaskAdmin;
  readonly prefix: string;
  /** Resolves once every given pattern has nothing pending, in flight or delayed (or rejects at the timeout). */
  drain(patterns: string | readonly string[], timeoutMs?: number): Promise<void>;
  /** Stops the worker and the producer, and deletes every key of this prefix. */
  close(): Promise<void>;
}

/**
 * Starts your handlers as a worker and a `RedisTaskClient` in one Nest testing module, on a fresh key
 * prefix; `close()` stops everything and removes the prefix's keys.
 *
 * ```ts
 * const tasks = await createRedisTaskTestingApp({ controllers: [MailController], providers: [MailService] });
 * await firstValueFrom(tasks.client.emit('mail.send', { to: 'a@b.c' }));
 * await tasks.drain('mail.send');
 * await tasks.close();
 * ```
 */
export async function createRedisTaskTestingApp(options: RedisTaskTestingOptions): Promise<RedisTaskTestingApp> {
  const connection = options.connection ?? process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  const prefix = options.prefix ?? `test-${randomBytes(6).toString('hex')}`;
  const imports: (Type | DynamicModule)[] = [
    ...((options.imports ?? []) as (Type | DynamicModule)[]),
    RedisTaskModule.forRoot({ connection, prefix, reaperIntervalMs: false }),
  ];
  let builder = Test.createTestingModule({ imports, providers: options.providers, controllers: options.controllers });
  if (options.configure) builder = options.configure(builder);
  const module = await builder.compile();
  // spread-ok: once per test app
  const transport = new RedisTaskTransport({ ...options.transport, connection, prefix });
  const app = module.createNestMicroservice({ strategy: transport });
  try {
    await app.listen();
  } catch (error) {
    await app.close().catch(() => undefined);
    await module.close().catch(() => undefined);
    throw error;
  }
  const client = module.get(RedisTaskClient);
  const admin = module.get(RedisTaskAdmin);
  await client.connect();
  return {
    module,
    app,
    transport,
    client,
    admin,
    prefix,
    async drain(patterns, timeoutMs = 10_000) {
      const list = typeof patterns === 'string' ? [patterns] : patterns;
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const stats = await Promise.all(list.map((pattern) => admin.stats(pattern)));
        if (stats.every((s) => s.pending.total + s.inFlight.total + s.delayed === 0)) return;
        if (Date.now() > deadline) {
          const left = stats
            .map((s) => `${s.queue}: ${s.pending.total} pending, ${s.inFlight.total} in flight, ${s.delayed} delayed`)
            .join('; ');
          throw new Error(`tasks did not drain within ${timeoutMs} ms (${left})`);
        }
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    },
    async close() {
      await app.close();
      await module.close();
      // Nothing of this prefix runs any more: its keys go (a worker still alive would make this throw).
      await deleteRedisTaskPrefix({ connection, prefix });
    },
  };
}

/**
 * Deletes every key of one prefix, for the teardown of a test that ran a whole app on its own prefix
 * (`Test.createTestingModule({ imports: [AppModule] })`): call it after `app.close()`. Refused with
 * `PrefixInUseError`, nothing deleted, while a worker of the prefix is still alive.
 *
 * ```ts
 * afterAll(async () => {
 *   await app.close();
 *   await deleteRedisTaskPrefix({ prefix: process.env.TASKS_PREFIX! });
 * });
 * ```
 */
export async function deleteRedisTaskPrefix(options: {
  readonly prefix: string;
  /** Redis to use. Default: `REDIS_URL`, else `redis://127.0.0.1:6379`. */
  readonly connection?: RedisTaskTransportOptions['connection'];
}): Promise<DeletedPrefix> {
  const problem = nameProblem(options.prefix);
  if (problem) throw new InvalidOptionError('prefix', problem);
  return deletePrefixAt(options.connection ?? defaultConnection(), options.prefix);
}
