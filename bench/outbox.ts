/**
 * The transactional outbox (README "Enqueue inside a transaction"), as an app runs it: TypeORM on
 * PostgreSQL and on MariaDB, `@nestjs-cls/transactional`, RedisTaskModule and RedisTaskOutboxModule, a
 * worker of concurrency 16 in the same process. Per database: what an order placed in a transaction costs
 * with its task written to the outbox, against the order's transaction with an emit after its commit (the
 * lossy way) and a plain emit; commit → handler start, paced; and the relay's throughput over a backlog.
 */
import 'reflect-metadata';
import { randomBytes } from 'node:crypto';
import { Controller, Injectable, Module, type INestApplicationContext, type INestMicroservice } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventPattern, Payload } from '@nestjs/microservices';
import { ClsModule } from 'nestjs-cls';
import { ClsPluginTransactional, TransactionHost, Transactional } from '@nestjs-cls/transactional';
import { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { DataSource, type EntityManager } from 'typeorm';
import pg from 'pg';
import mysql from 'mysql2/promise';
import { firstValueFrom } from 'rxjs';
import type { Redis } from 'ioredis';
import { RedisTaskClient, RedisTaskModule, RedisTaskTransport } from '../lib/index.js';
import { RedisTaskOutbox, RedisTaskOutboxModule, outboxMigration } from '../lib/outbox.js';
import { Completion, deleteMatching, percentile, roundSample, shownSample, sleep } from './measure.js';

type Dialect = 'postgres' | 'mysql';
const PG_URL = process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const MYSQL_URL = process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';
const DB = Symbol('DB');
/** Sequential calls per emit round; orders of the latency run (at LATENCY_RATE per second); backlog rows. */
const EMITS = 400;
const LATENCY_ORDERS = 1_000;
const LATENCY_RATE = 200;
const BACKLOG = 20_000;

/** Handler starts by order id (ms, performance.now()), and every task handled. */
const started = new Map<string, number>();
const handled = new Completion();
let schema = '';
let dialect: Dialect = 'postgres';

@Controller()
class OrderHandler {
  @EventPattern<string>('bench.order')
  placed(@Payload() order: { id: string }): void {
    started.set(order.id, performance.now());
    handled.hit();
  }
}

@Injectable()
class Orders {
  constructor(
    private readonly txHost: TransactionHost<TransactionalAdapterTypeOrm>,
    private readonly client: RedisTaskClient,
  ) {}

  private insert(id: string): Promise<unknown> {
    return (this.txHost.tx as EntityManager).query(
      `INSERT INTO ${schema}.orders (id) VALUES (${dialect === 'postgres' ? '$1' : '?'})`,
      [id],
    );
  }

  /** The order and its task in one transaction (the outbox). */
  @Transactional()
  async placeWithOutbox(id: string): Promise<void> {
    await this.insert(id);
    await firstValueFrom(this.client.emit('bench.order', { id }));
  }

  @Transactional()
  async insertOnly(id: string): Promise<void> {
    await this.insert(id);
  }

  /** The order's transaction, then the emit after its commit (lost if the process dies in between). */
  async placeThenEmit(id: string): Promise<void> {
    await this.insertOnly(id);
    await firstValueFrom(this.client.emit('bench.order', { id }));
  }

  async emitOnly(id: string): Promise<void> {
    await firstValueFrom(this.client.emit('bench.order', { id }));
  }

  /** `count` tasks in the outbox, in transactions of 1,000 (one emitBatch each). */
  @Transactional()
  async backlog(prefix: string, count: number): Promise<void> {
    await this.client.emitBatch(
      'bench.order',
      Array.from({ length: count }, (_, i) => ({ id: `${prefix}-${i}` })),
    );
  }
}

/** A schema (PostgreSQL) or database (MariaDB) of the bench's own, with the outbox and orders tables. */
async function createSchema(): Promise<{ drop(): Promise<void> }> {
  schema = `rtb_${randomBytes(4).toString('hex')}`;
  if (dialect === 'postgres') {
    const client = new pg.Client({ connectionString: PG_URL });
    await client.connect();
    await client.query(`CREATE SCHEMA ${schema}`);
    await client.query(outboxMigration('postgres', `${schema}.redis_task_outbox`));
    await client.query(`CREATE TABLE ${schema}.orders (id TEXT PRIMARY KEY)`);
    return {
      async drop() {
        await client.query(`DROP SCHEMA ${schema} CASCADE`);
        await client.end();
      },
    };
  }
  const connection = await mysql.createConnection({ uri: MYSQL_URL });
  await connection.query(`CREATE DATABASE ${schema}`);
  await connection.query(outboxMigration('mysql', `${schema}.redis_task_outbox`));
  await connection.query(`CREATE TABLE ${schema}.orders (id VARCHAR(100) PRIMARY KEY) ENGINE=InnoDB`);
  return {
    async drop() {
      await connection.query(`DROP DATABASE ${schema}`);
      await connection.end();
    },
  };
}

async function startApps(
  redisUrl: string,
  prefix: string,
  relay: boolean,
): Promise<{ app: INestApplicationContext; worker: INestMicroservice; close(): Promise<void> }> {
  const dataSource = new DataSource(
    dialect === 'postgres'
      ? { type: 'postgres', url: PG_URL, poolSize: 10 }
      : { type: 'mysql', url: MYSQL_URL, poolSize: 10 },
  );
  await dataSource.initialize();
  @Module({ providers: [{ provide: DB, useValue: dataSource }], exports: [DB] })
  class DbModule {}
  @Module({
    imports: [
      ClsModule.forRoot({
        global: true,
        plugins: [
          new ClsPluginTransactional({
            imports: [DbModule],
            adapter: new TransactionalAdapterTypeOrm({ dataSourceToken: DB }),
          }),
        ],
      }),
      RedisTaskModule.forRoot({ connection: redisUrl, prefix, clientId: 'bench', reaperIntervalMs: false }),
      RedisTaskOutboxModule.forRoot({ table: `${schema}.redis_task_outbox`, relay }),
    ],
    providers: [Orders],
  })
  class AppModule {}
  @Module({ controllers: [OrderHandler] })
  class WorkerModule {}
  const app = await NestFactory.createApplicationContext(AppModule, { logger: false });
  const worker = await NestFactory.createMicroservice(WorkerModule, {
    strategy: new RedisTaskTransport({ connection: redisUrl, prefix, concurrency: 16 }),
    logger: false,
  });
  await worker.listen();
  let closed = false;
  return {
    app,
    worker,
    async close() {
      if (closed) return;
      closed = true;
      await worker.close();
      await app.close();
      await dataSource.destroy();
    },
  };
}

type EmitCase = 'outbox: order row + emit in one transaction' | 'order row committed, then emit (lossy)' | 'emit alone';
const EMIT_CASES: readonly EmitCase[] = [
  'outbox: order row + emit in one transaction',
  'order row committed, then emit (lossy)',
  'emit alone',
];

/** Calls per second of `EMITS` awaited calls of a case, every task handled before the next round. */
async function emitRound(orders: Orders, kind: EmitCase): Promise<number> {
  const run = randomBytes(3).toString('hex');
  const before = handled.count;
  const start = performance.now();
  for (let i = 0; i < EMITS; i++) {
    const id = `${run}-${i}`;
    if (kind === 'emit alone') await orders.emitOnly(id);
    else if (kind === 'order row committed, then emit (lossy)') await orders.placeThenEmit(id);
    else await orders.placeWithOutbox(id);
  }
  const rate = EMITS / ((performance.now() - start) / 1000);
  await handled.until(before + EMITS);
  return rate;
}

/** Commit → handler start (ms) of orders placed at LATENCY_RATE per second, p50 and p99. */
async function latency(orders: Orders, outbox: boolean): Promise<{ p50: number; p99: number }> {
  const run = randomBytes(3).toString('hex');
  const committed = new Map<string, number>();
  const before = handled.count;
  const start = performance.now();
  const calls: Promise<void>[] = [];
  for (let i = 0; i < LATENCY_ORDERS; i++) {
    const due = start + (i * 1000) / LATENCY_RATE;
    const wait = due - performance.now();
    if (wait > 0) await sleep(wait);
    const id = `${run}-${i}`;
    calls.push(
      outbox
        ? orders.placeWithOutbox(id).then(() => void committed.set(id, performance.now()))
        : orders.insertOnly(id).then(async () => {
            committed.set(id, performance.now());
            await orders.emitOnly(id);
          }),
    );
  }
  await Promise.all(calls);
  await handled.until(before + LATENCY_ORDERS);
  // A handler may start before the caller heard its commit: counted as 0.
  const gaps = [...committed]
    .map(([id, at]) => Math.max(0, (started.get(id) ?? Number.NaN) - at))
    .sort((a, b) => a - b);
  return { p50: percentile(gaps, 50), p99: percentile(gaps, 99) };
}

/** Rows per second one relay moves from a backlog of BACKLOG rows (no other relay running). */
async function relayThroughput(redisUrl: string, redis: Redis): Promise<number> {
  const prefix = `rtbo${randomBytes(3).toString('hex')}`;
  const apps = await startApps(redisUrl, prefix, false);
  try {
    const orders = apps.app.get(Orders);
    await apps.worker.close(); // nothing runs the tasks: only the relay is measured (closed again below: a no-op)
    for (let i = 0; i < BACKLOG; i += 1_000) await orders.backlog(`${prefix}-${i}`, 1_000);
    const outbox = apps.app.get(RedisTaskOutbox);
    const start = performance.now();
    while ((await outbox.relayNow()) > 0);
    return BACKLOG / ((performance.now() - start) / 1000);
  } finally {
    await apps.close();
    await deleteMatching(redis, `${prefix}*`);
  }
}

/** The outbox's rows for one database. */
async function databaseRows(on: Dialect, redisUrl: string, redis: Redis, repeats: number): Promise<string[]> {
  dialect = on;
  const created = await createSchema();
  const prefix = `rtbo${randomBytes(3).toString('hex')}`;
  const apps = await startApps(redisUrl, prefix, true);
  const name = on === 'postgres' ? 'PostgreSQL 15' : 'MariaDB 10.11';
  try {
    const orders = apps.app.get(Orders);
    for (const kind of EMIT_CASES) await emitRound(orders, kind); // warm-up (JIT, pools), not reported
    const rounds = new Map<EmitCase, number[]>(EMIT_CASES.map((kind) => [kind, []]));
    for (let r = 0; r < repeats; r++)
      for (const kind of EMIT_CASES) rounds.get(kind)?.push(await emitRound(orders, kind));
    const lat = { outbox: [] as { p50: number; p99: number }[], after: [] as { p50: number; p99: number }[] };
    for (let r = 0; r < repeats; r++) {
      lat.outbox.push(await latency(orders, true));
      lat.after.push(await latency(orders, false));
    }
    await apps.close();
    const relay: number[] = [];
    for (let r = 0; r < repeats; r++) relay.push(await relayThroughput(redisUrl, redis));
    const wake = on === 'postgres' ? "its own process's commit, NOTIFY" : "its own process's commit";
    const lats = (of: { p50: number; p99: number }[]) =>
      `${shownSample(roundSample(of.map((l) => l.p50)), 2)} | ${shownSample(roundSample(of.map((l) => l.p99)), 2)}`;
    return [
      ...EMIT_CASES.map(
        (kind) => `| ${name} | ${kind} | ${shownSample(roundSample(rounds.get(kind) ?? []), 0)} | | | |`,
      ),
      `| ${name} | commit → handler start, outbox (relay: ${wake}) | | ${lats(lat.outbox)} | |`,
      `| ${name} | commit → handler start, emit after the commit | | ${lats(lat.after)} | |`,
      `| ${name} | one relay over a backlog of ${BACKLOG.toLocaleString('en')} rows | | | | ${shownSample(roundSample(relay), 0)} |`,
    ];
  } finally {
    await apps.close().catch(() => undefined);
    await created.drop();
    await deleteMatching(redis, `${prefix}*`);
  }
}

export async function outboxRows(redisUrl: string, redis: Redis, repeats: number): Promise<string> {
  const rows = [
    ...(await databaseRows('postgres', redisUrl, redis, repeats)),
    ...(await databaseRows('mysql', redisUrl, redis, repeats)),
  ];
  return [
    '| database | what | calls/s (awaited, one at a time) | p50 (ms) | p99 (ms) | rows/s |',
    '|---|---|---:|---:|---:|---:|',
    ...rows,
  ].join('\n');
}

export const OUTBOX_INTRO = [
  '## What the transactional outbox costs',
  '',
  'TypeORM with `@nestjs-cls/transactional` on PostgreSQL 15 and MariaDB 10.11 (this machine), RedisTaskModule and',
  `RedisTaskOutboxModule, a worker of concurrency 16 in the same process. Calls: ${EMITS} awaited calls one after another: an order`,
  'row and its emit in one transaction (the outbox row written with it), the order row committed and then an emit (the lossy',
  'way: a process dying between the two loses the task), and an emit alone. Commit → handler start: ' +
    `${LATENCY_ORDERS.toLocaleString('en')} orders at ${LATENCY_RATE}/s, from the`,
  'moment the caller heard its commit to the handler start (the relay runs in the emitting process: the commit of its rows wakes',
  "it at once, and on PostgreSQL the commit's NOTIFY wakes every relay; relays of other processes on MariaDB poll, every 500 ms",
  'by default). Relay: one relay moving a backlog',
  `of ${BACKLOG.toLocaleString('en')} rows (claim 200, enqueue each under its record, delete, commit). Median (min–max) of rounds.`,
];
