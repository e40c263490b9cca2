/**
 * The relay against real databases and Redis, with the outbox's core parts (no Nest app: the custom
 * driver executors): a relay that enqueued and then lost its transaction, two relays racing,
 * Redis down for 10 s, too few replicas, an unreadable row, and PostgreSQL's NOTIFY at commit only.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { firstValueFrom } from 'rxjs';
import { RedisTaskClient, ReplicationTimeoutError } from '../../lib/index.js';
import { OutboxListener } from '../../lib/core/outbox/outbox-listener.js';
import { resolveOutboxOptions, type OutboxExecutor } from '../../lib/core/outbox/outbox-options.js';
import { OutboxRelay, type RelayTarget } from '../../lib/core/outbox/outbox-relay.js';
import { OutboxStore } from '../../lib/core/outbox/outbox-store.js';
import { startRedisServer } from '../../scripts/redis-server.mjs';
import { createDatabase, type TestDatabase } from '../support/databases.js';
import { startWorker, type Worker } from '../support/nest.js';
import { deleteKeys, openRedis, redisUrl, testPrefix, waitFor } from '../support/redis.js';
import { OrderHandler, seen } from './outbox-process.js';
import { mysqlDriverExecutor, postgresDriverExecutor } from '../../lib/core/outbox/driver-executors.js';

const redis = openRedis();
afterAll(() => redis.disconnect());

type Dialect = 'postgres' | 'mysql';

describe.each<Dialect>(['postgres', 'mysql'])('the outbox relay on %s', (dialect) => {
  let db: TestDatabase;
  let executor: OutboxExecutor;
  let prefix: string;
  let client: RedisTaskClient;
  let worker: Worker;
  const relays: OutboxRelay[] = [];

  /** The outbox's store on the driver's pool, as a relay sees it. */
  const relayStore = (): OutboxStore =>
    new OutboxStore(executor, db.outboxTable, { tx: db.pool, isTransactionActive: () => false });

  /** A relay on `target` (the client's by default), batches of `batchSize`. */
  const relayOf = (target: RelayTarget = client.outboxTarget(), batchSize = 200): OutboxRelay => {
    const relay = new OutboxRelay(relayStore(), target, resolveOutboxOptions({ batchSize, pollMs: 20 }));
    relays.push(relay);
    return relay;
  };

  /** Places orders in one committed transaction: each order's row and its task's outbox row. */
  const placeOrders = async (on: RedisTaskClient, ids: readonly string[]): Promise<void> => {
    await executor.transaction(db.pool, async (tx) => {
      const placeholder = dialect === 'postgres' ? '$1' : '?';
      for (const id of ids)
        await executor.query(tx, `INSERT INTO ${db.schema}.orders (id) VALUES (${placeholder})`, [id]);
      on.useOutbox(
        Object.assign(new OutboxStore(executor, db.outboxTable, { tx, isTransactionActive: () => true }), {
          mode: 'outbox' as const,
        }),
      );
      try {
        const receipts = await on.emitBatch(
          'order.placed',
          ids.map((id) => ({ id })),
        );
        expect(receipts.every((receipt) => (receipt as { outbox?: boolean }).outbox === true)).toBe(true);
      } finally {
        on.useOutbox(undefined);
      }
    });
  };

  beforeAll(async () => {
    db = await createDatabase(dialect);
    seen.db = db;
    executor = dialect === 'postgres' ? postgresDriverExecutor() : mysqlDriverExecutor();
    prefix = testPrefix(`outbox-relay-${dialect}`);
    client = new RedisTaskClient({ connection: redisUrl(), prefix, clientId: 'api' });
    worker = await startWorker(prefix, [OrderHandler], { concurrency: 1 });
  });

  afterEach(async () => {
    for (const relay of relays.splice(0)) await relay.stop();
    seen.runs.clear();
    seen.unseen.length = 0;
  });

  afterAll(async () => {
    await worker?.app.close();
    await client?.close();
    await db?.drop();
    await deleteKeys(redis, prefix);
  });

  /** Every task emitted before it has run: a direct task on the same list run by the one-at-a-time worker. */
  const drained = async (name: string): Promise<void> => {
    await firstValueFrom(client.emit('order.placed', { id: `sentinel-${name}` }));
    await waitFor(() => seen.runs.has(`sentinel-${name}`), `the sentinel ${name} to run`);
  };

  it('relays a row again after a relay enqueued it and lost its transaction, and the task runs once', async () => {
    await placeOrders(client, ['o-lost']);
    const real = client.outboxTarget();
    const crashing: RelayTarget = {
      relay: async (pattern, tasks, recordMs) => {
        await real.relay(pattern, tasks, recordMs);
        throw new Error('the process died after the enqueue, before the delete committed');
      },
      relayed: real.relayed,
    };
    await expect(relayOf(crashing).relayOnce()).rejects.toThrow('the process died');
    expect(await db.outboxRows()).toHaveLength(1);
    // The task ran (and finished) before the row is relayed again: no live task holds anything for it.
    await waitFor(() => seen.runs.get('o-lost') === 1, 'the first relay of o-lost to run');
    expect(await relayOf().relayOnce()).toBe(1);
    expect(await db.outboxRows()).toEqual([]);
    await drained('lost');
    expect(seen.runs.get('o-lost')).toBe(1);
  });

  it('moves each row once with two relays racing', async () => {
    const ids = Array.from({ length: 400 }, (_, i) => `o-race-${i}`);
    for (let i = 0; i < ids.length; i += 100) await placeOrders(client, ids.slice(i, i + 100));
    const [a, b] = [relayOf(undefined, 25), relayOf(undefined, 25)];
    // Each relay goes on until the table is empty (on MySQL a relay whose turn it is not claims nothing).
    const drain = async (relay: OutboxRelay): Promise<void> => {
      while ((await relayStore().stats()).depth > 0) await relay.relayOnce();
    };
    await Promise.all([drain(a), drain(b), drain(a), drain(b)]);
    // A row claimed by both would be counted twice (its second enqueue would write nothing, but count).
    expect(a.counts.relayed + b.counts.relayed).toBe(400);
    expect(a.counts.relayed).toBeGreaterThan(0);
    expect(b.counts.relayed).toBeGreaterThan(0);
    await waitFor(() => ids.every((id) => seen.runs.get(id) === 1), 'every raced task to run');
    await drained('race');
    expect(ids.filter((id) => seen.runs.get(id) !== 1)).toEqual([]);
    expect(seen.unseen).toEqual([]);
  });

  it('leaves rows waiting while Redis is down for 10 s, and drains them after', async () => {
    // Its AOF in a directory of its own (never the working directory another suite's Redis may share).
    const dir = mkdtempSync(join(tmpdir(), 'tasks-outbox-aof-'));
    const aof = ['--appendonly', 'yes', '--appendfsync', 'always', '--dir', dir];
    let server = await startRedisServer(aof);
    const ownPrefix = testPrefix(`outbox-down-${dialect}`);
    const ownClient = new RedisTaskClient({
      connection: server.url,
      prefix: ownPrefix,
      clientId: 'api',
      enqueueTimeoutMs: 1_000,
    });
    const ownWorker = await startWorker(ownPrefix, [OrderHandler], { connection: server.url });
    try {
      const relay = relayOf(ownClient.outboxTarget(), 50);
      relay.start();
      await placeOrders(ownClient, ['o-before']);
      await waitFor(() => seen.runs.get('o-before') === 1, 'o-before to run');
      await server.stop();
      const ids = Array.from({ length: 20 }, (_, i) => `o-down-${i}`);
      await placeOrders(ownClient, ids); // the database commits: Redis is not needed for that
      relay.wake();
      await new Promise((resolve) => setTimeout(resolve, 10_000)); // the outage the scenario is about
      expect(await db.outboxRows()).toHaveLength(20);
      expect(relay.counts.failures).toBeGreaterThan(0);
      server = await startRedisServer(aof, server.port);
      await waitFor(() => ids.every((id) => seen.runs.get(id) === 1), 'every task of the outage to run', {
        timeoutMs: 30_000,
      });
      await waitFor(async () => (await db.outboxRows()).length === 0, 'the outbox to be empty');
      expect(ids.filter((id) => seen.runs.get(id) !== 1)).toEqual([]);
    } finally {
      await ownWorker.app.close();
      await ownClient.close();
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('fails the relay when too few replicas confirm, the rows left waiting', async () => {
    const durable = new RedisTaskClient({
      connection: redisUrl(),
      prefix,
      clientId: 'api',
      durability: { replicas: 1, timeoutMs: 200 },
    });
    try {
      await placeOrders(durable, ['o-durable']);
      await expect(relayOf(durable.outboxTarget()).relayOnce()).rejects.toThrow(ReplicationTimeoutError);
      expect(await db.outboxRows()).toHaveLength(1);
      // Relayed without durability now: its record answers the first enqueue (written once), the row goes.
      expect(await relayOf().relayOnce()).toBe(1);
      await drained('durable');
      expect(seen.runs.get('o-durable')).toBe(1);
    } finally {
      await durable.close();
    }
  });

  it('marks a row it cannot read and relays the others', async () => {
    const placeholders = dialect === 'postgres' ? '$1, $2, $3, $4' : '?, ?, ?, ?';
    await db.query(`INSERT INTO ${db.outboxTable} (task_id, pattern, shard_key, fields) VALUES (${placeholders})`, [
      'broken-1',
      'order.placed',
      'api',
      'not json',
    ]);
    await placeOrders(client, ['o-next']);
    expect(await relayOf().relayOnce()).toBe(2);
    const [left] = await db.outboxRows();
    expect(left).toMatchObject({ task_id: 'broken-1' });
    expect(String(left.error)).toMatch(/cannot be relayed: its fields are not JSON/);
    const stats = await relayStore().stats();
    expect(stats).toMatchObject({ depth: 0, rejected: 1 });
    await waitFor(() => seen.runs.get('o-next') === 1, 'o-next to run');
    expect(await relayOf().relayOnce()).toBe(0);
    await db.query(`DELETE FROM ${db.outboxTable}`);
  });

  if (dialect === 'postgres') {
    it('hears of rows at their commit (NOTIFY), never before and never after a rollback', async () => {
      let heard = 0;
      const pool = db.pool as { connect(): Promise<unknown> };
      const listener = new OutboxListener(pool, relayStore().sql.channel ?? '', () => heard++);
      await listener.start();
      try {
        await waitFor(() => heard === 1, 'the wake at the start'); // rows may have waited before it listened
        const before = heard;
        await executor
          .transaction(db.pool, async (tx) => {
            await new OutboxStore(executor, db.outboxTable, { tx, isTransactionActive: () => true }).write([
              { taskId: 'rolled', pattern: 'order.placed', shardKey: 'api', fields: '["api","x"]' },
            ]);
            throw new Error('roll back');
          })
          .catch(() => undefined);
        await executor.transaction(db.pool, async (tx) => {
          await new OutboxStore(executor, db.outboxTable, { tx, isTransactionActive: () => true }).write([
            { taskId: 'kept', pattern: 'order.placed', shardKey: 'api', fields: '["api","x"]' },
          ]);
          await executor.query(tx, 'SELECT 1', []);
          expect(heard).toBe(before); // written, not committed: nothing heard
        });
        await waitFor(() => heard === before + 1, 'the notification of the commit');
        // The rolled-back write sent nothing: one notification, for the commit.
        await executor.query(db.pool, `SELECT pg_notify('${relayStore().sql.channel}', '')`, []);
        await waitFor(() => heard === before + 2, 'a notification sent after');
      } finally {
        await listener.stop();
        await db.query(`DELETE FROM ${db.outboxTable}`);
      }
    });
  }
});
