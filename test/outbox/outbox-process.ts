/** The outbox app fixture (fixtures/outbox-app.ts, compiled by the global setup) as a forked child process. */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Controller } from '@nestjs/common';
import { EventPattern, Payload } from '@nestjs/microservices';
import type { RedisTaskOutboxOptions } from '../../lib/core/outbox/outbox-options.js';
import { mysqlUrl, postgresUrl, type Orm, type TestDatabase } from '../support/databases.js';
import { redisUrl } from '../support/redis.js';

export const OUTBOX_APP = fileURLToPath(
  new URL('../../.chaos-build/test/outbox/fixtures/outbox-app.js', import.meta.url),
);

/** The environment of an outbox app process on `db`. */
export function outboxAppEnv(
  orm: Orm,
  db: TestDatabase,
  prefix: string,
  options: RedisTaskOutboxOptions = {},
  redis = redisUrl(),
): Record<string, string> {
  return {
    ORM: orm,
    DIALECT: db.dialect,
    SCHEMA: db.schema,
    PREFIX: prefix,
    REDIS_URL: redis,
    PG_URL: postgresUrl(),
    MYSQL_URL: mysqlUrl(),
    OUTBOX_OPTIONS: JSON.stringify(options),
  };
}

export interface OutboxAppProcess {
  readonly child: ChildProcess;
  /** The HTTP port of an app started with HTTP=1 (0 otherwise). */
  port: number;
  output: string;
  call<T = unknown>(op: string, ...args: unknown[]): Promise<T>;
  close(): Promise<void>;
}

/** An error the app process answered with (its name, message and code kept). */
export class AppError extends Error {
  constructor(
    readonly remoteName: string,
    message: string,
    readonly code?: string,
  ) {
    super(message);
  }
}

export async function startOutboxApp(env: Record<string, string>): Promise<OutboxAppProcess> {
  const child = fork(OUTBOX_APP, [], {
    env: { ...process.env, ...env, NO_COLOR: '1' },
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
  const waiting = new Map<number, { resolve(value: unknown): void; reject(error: Error): void }>();
  let seq = 0;
  const app: OutboxAppProcess = {
    child,
    port: 0,
    output: '',
    call<T>(op: string, ...args: unknown[]): Promise<T> {
      return new Promise<T>((resolve, reject) => {
        const id = ++seq;
        waiting.set(id, { resolve: resolve as (value: unknown) => void, reject });
        child.send({ seq: id, op, args });
      });
    },
    async close() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      await app.call('close').catch(() => undefined);
      await exited;
    },
  };
  child.stdout?.on('data', (chunk: Buffer) => (app.output += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (app.output += chunk.toString()));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the outbox app did not start in 30 s:\n${app.output}`)), 30_000);
    child.on(
      'message',
      (message: {
        ready?: boolean;
        port?: number;
        seq?: number;
        ok?: boolean;
        value?: unknown;
        error?: { name: string; message: string; code?: string };
      }) => {
        if (message.ready) {
          app.port = message.port ?? 0;
          clearTimeout(timer);
          resolve();
          return;
        }
        const call = waiting.get(message.seq ?? -1);
        if (!call) return;
        waiting.delete(message.seq ?? -1);
        if (message.ok) call.resolve(message.value);
        else
          call.reject(new AppError(message.error?.name ?? 'Error', message.error?.message ?? '', message.error?.code));
      },
    );
    child.once('exit', (code) => {
      clearTimeout(timer);
      for (const call of waiting.values()) call.reject(new Error(`the outbox app exited (${code}):\n${app.output}`));
      reject(new Error(`the outbox app exited (${code}):\n${app.output}`));
    });
  });
  return app;
}

/** What the handler saw: runs per order id, and orders whose row it could not read. */
export const seen = {
  runs: new Map<string, number>(),
  unseen: [] as string[],
  db: undefined as TestDatabase | undefined,
};

@Controller()
export class OrderHandler {
  @EventPattern<string>('order.placed')
  async placed(@Payload() order: { id: string }): Promise<void> {
    const db = seen.db;
    if (!db) throw new Error('no database');
    if (order.id.startsWith('sentinel-')) {
      seen.runs.set(order.id, 1); // a test's marker, sent straight to Redis: no order row
      return;
    }
    const placeholder = db.dialect === 'postgres' ? '$1' : '?';
    const rows = await db.query(`SELECT id FROM ${db.schema}.orders WHERE id = ${placeholder}`, [order.id]);
    if (rows.length === 0) seen.unseen.push(order.id);
    seen.runs.set(order.id, (seen.runs.get(order.id) ?? 0) + 1);
  }
}
