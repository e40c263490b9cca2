import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { createDatabase, type Orm, type TestDatabase } from '../support/databases.js';
import { startWorker, type Worker } from '../support/nest.js';
import { deleteKeys, keysUnder, openRedis, testPrefix, waitFor } from '../support/redis.js';
import { OrderHandler, outboxAppEnv, seen, startOutboxApp, type OutboxAppProcess } from './outbox-process.js';

const redis = openRedis();

afterAll(async () => {
  redis.disconnect();
});

const CASES: [Orm, 'postgres' | 'mysql'][] = [
  ['typeorm', 'postgres'],
  ['drizzle', 'postgres'],
  ['typeorm', 'mysql'],
  ['drizzle', 'mysql'],
];

describe.each(CASES)('the outbox with %s on %s', (orm, dialect) => {
  let db: TestDatabase;
  let app: OutboxAppProcess;
  let worker: Worker;
  let prefix: string;

  beforeAll(async () => {
    db = await createDatabase(dialect);
    seen.db = db;
    prefix = testPrefix(`outbox-${orm}-${dialect}`);
    app = await startOutboxApp(outboxAppEnv(orm, db, prefix));
    worker = await startWorker(prefix, [OrderHandler]);
  });

  afterEach(() => {
    seen.runs.clear();
    seen.unseen.length = 0;
  });

  afterAll(async () => {
    await worker?.app.close();
    await app?.close();
    await db?.drop();
    await deleteKeys(redis, prefix);
  });

  it('runs a task emitted in a committed transaction once, and its handler sees the row', async () => {
    const receipt = (await app.call('place', 'o-1')) as { id: string; outbox?: boolean };
    expect(receipt.outbox).toBe(true);
    await waitFor(() => seen.runs.get('o-1') === 1, 'the task of o-1 to run');
    expect(seen.unseen).toEqual([]);
    await waitFor(async () => (await db.outboxRows()).length === 0, 'the outbox to be empty');
    expect(seen.runs.get('o-1')).toBe(1);
  });

  it('never enqueues a task of a rolled-back transaction', async () => {
    await expect(app.call('place', 'o-rolled', true)).rejects.toThrow('rolled back on purpose');
    // A committed order after it is relayed: the relay has looked at the table since the rollback.
    await app.call('place', 'o-after');
    await waitFor(() => seen.runs.get('o-after') === 1, 'the task of o-after to run');
    expect(seen.runs.has('o-rolled')).toBe(false);
    expect(await db.orders()).not.toContain('o-rolled');
    // The relay deletes a row in the transaction it commits after the enqueue, so the task may run first.
    await waitFor(async () => (await db.outboxRows()).length === 0, 'the outbox to be empty');
  });

  it('writes an emitBatch inside a transaction as one insert, all relayed', async () => {
    const ids = Array.from({ length: 50 }, (_, i) => `o-batch-${i}`);
    const receipts = (await app.call('placeMany', ids)) as { outbox?: boolean }[];
    expect(receipts).toHaveLength(50);
    expect(receipts.every((receipt) => receipt.outbox === true)).toBe(true);
    await waitFor(() => ids.every((id) => seen.runs.get(id) === 1), 'every task of the batch to run');
    expect(seen.unseen).toEqual([]);
  });

  it('emits outside a transaction as before (straight to Redis)', async () => {
    const receipt = (await app.call('emitDirect', 'o-direct')) as { outbox?: boolean };
    expect(receipt.outbox).toBeUndefined();
    await waitFor(() => seen.runs.has('o-direct'), 'the direct task to run');
  });

  it('refuses send() inside a transaction, naming why, and rolls back', async () => {
    await expect(app.call('sendInside', 'o-send')).rejects.toMatchObject({
      remoteName: 'InvalidTaskError',
      code: 'INVALID_TASK',
    });
    await expect(app.call('sendInside', 'o-send')).rejects.toThrow(/inside a database transaction/);
    expect(await db.orders()).not.toContain('o-send');
  });

  it('keeps the relay records 10 s at most once their rows are deleted', async () => {
    await app.call('place', 'o-keys');
    await waitFor(() => seen.runs.get('o-keys') === 1, 'the task of o-keys to run');
    // The task may run before the relay's delete commits (it commits after the enqueue); the records are shortened
    // once it did.
    await waitFor(async () => (await db.outboxRows()).length === 0, 'the outbox to be empty');
    const records = (await keysUnder(redis, prefix)).filter((key) => key.includes(':call:ob.'));
    expect(records.length).toBeGreaterThan(0);
    const ttls = async () => Promise.all(records.map((key) => redis.pttl(key)));
    await waitFor(
      async () => (await ttls()).every((ttl) => ttl > 0 && ttl <= 10_000),
      'every relay record kept 10 s at most',
      { timeoutMs: 5_000 },
    );
  });
});

describe.each<[Orm, 'postgres' | 'mysql']>([
  ['typeorm', 'postgres'],
  ['drizzle', 'mysql'],
])('relays in other processes with %s on %s', (orm, dialect) => {
  let db: TestDatabase;
  let worker: Worker;
  let prefix: string;
  const apps: OutboxAppProcess[] = [];

  beforeAll(async () => {
    db = await createDatabase(dialect);
    seen.db = db;
    prefix = testPrefix(`outbox-wake-${orm}-${dialect}`);
    worker = await startWorker(prefix, [OrderHandler]);
  });

  afterAll(async () => {
    for (const app of apps) await app.close();
    await worker?.app.close();
    await db?.drop();
    await deleteKeys(redis, prefix);
    seen.runs.clear();
  });

  it(
    dialect === 'postgres'
      ? 'wakes a relay at the commit of another process (NOTIFY), however long its poll'
      : 'moves rows an app without a relay committed, by polling',
    async () => {
      // The relay's app polls once an hour on PostgreSQL: only the commit's NOTIFY can wake it in time.
      const pollMs = dialect === 'postgres' ? 3_600_000 : 100;
      apps.push(await startOutboxApp(outboxAppEnv(orm, db, prefix, { pollMs })));
      const writer = await startOutboxApp(outboxAppEnv(orm, db, prefix, { relay: false }));
      apps.push(writer);
      for (let i = 0; i < 5; i++) await writer.call('place', `o-wake-${i}`);
      await waitFor(
        () => [0, 1, 2, 3, 4].every((i) => seen.runs.get(`o-wake-${i}`) === 1),
        'the tasks of the other process to run',
      );
      // The relay enqueues, then deletes its rows and commits: a task can run before that commit.
      const stats = await waitFor(async () => {
        const read = (await writer.call('stats')) as { depth: number; relay?: unknown };
        return read.depth === 0 ? read : undefined;
      }, 'the relayed rows to be deleted');
      expect(stats.relay).toBeUndefined(); // the writer ran no relay: the other process moved the rows
      expect(await writer.call('relayNow')).toBe(0); // relayNow() works with the background relay off: nothing left
    },
  );
});

describe('the after-commit mode (no outbox table: lossy)', () => {
  let db: TestDatabase;
  let app: OutboxAppProcess;
  let worker: Worker;
  let prefix: string;

  beforeAll(async () => {
    db = await createDatabase('postgres');
    seen.db = db;
    prefix = testPrefix('outbox-after-commit');
    app = await startOutboxApp(outboxAppEnv('drizzle', db, prefix, { mode: 'after-commit' }));
    worker = await startWorker(prefix, [OrderHandler]);
  });

  afterAll(async () => {
    await worker?.app.close();
    await app?.close();
    await db?.drop();
    await deleteKeys(redis, prefix);
    seen.runs.clear();
  });

  it('sends the tasks of a transaction once it committed, never after a rollback, writing no row', async () => {
    const receipt = (await app.call('place', 'o-ac')) as { afterCommit?: boolean; outbox?: boolean };
    expect(receipt).toMatchObject({ afterCommit: true });
    expect(receipt.outbox).toBeUndefined();
    await expect(app.call('place', 'o-ac-rolled', true)).rejects.toThrow('rolled back on purpose');
    await app.call('placeMany', ['o-ac-1', 'o-ac-2']);
    await waitFor(
      () => ['o-ac', 'o-ac-1', 'o-ac-2'].every((id) => seen.runs.get(id) === 1),
      'the committed tasks to run',
    );
    expect(seen.unseen).toEqual([]);
    expect(seen.runs.has('o-ac-rolled')).toBe(false);
    expect(await db.outboxRows()).toEqual([]);
    expect(await app.call('stats')).toMatchObject({ afterCommit: { sent: 3, lost: 0 } });
  });
});
