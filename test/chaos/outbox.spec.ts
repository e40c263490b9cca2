/**
 * Chaos for the transactional outbox: app processes placing orders under load (each order's row and its
 * task's outbox row in one transaction, their relays moving rows to Redis) are killed with SIGKILL 200 times
 * in all, two at a time, on PostgreSQL and on MariaDB; a last app drains what they left. Every committed
 * order's task runs exactly once (0 lost, 0 duplicated), no task of a transaction the kill rolled back runs,
 * and every handler sees its order's row.
 */
import { afterAll, describe, expect, it } from '@jest/globals';
import { createDatabase, type TestDatabase } from '../support/databases.js';
import { startWorker, type Worker } from '../support/nest.js';
import { deleteKeys, openRedis, testPrefix, waitFor } from '../support/redis.js';
import { OrderHandler, OUTBOX_APP, outboxAppEnv, seen } from '../outbox/outbox-process.js';
import { startWorkerProcess, type WorkerProcess } from './processes.js';

const redis = openRedis();
afterAll(() => redis.disconnect());

/** Kills per database, in two lanes of app processes. */
const KILLS = 100;

describe.each<['typeorm' | 'drizzle', 'postgres' | 'mysql']>([
  ['typeorm', 'postgres'],
  ['drizzle', 'mysql'],
])('chaos: outbox apps on %s/%s killed with SIGKILL', (orm, dialect) => {
  let db: TestDatabase;
  let worker: Worker;
  const prefix = testPrefix(`outbox-chaos-${dialect}`);

  /** Stops the lanes and kills their app processes (set once the test made them). */
  let stopAll: () => Promise<void> = async () => undefined;

  afterAll(async () => {
    await stopAll();
    await worker?.app.close();
    await db?.drop();
    await deleteKeys(redis, prefix);
    seen.runs.clear();
    seen.unseen.length = 0;
  });

  it(`loses and repeats no committed task over ${KILLS} kills`, async () => {
    db = await createDatabase(dialect);
    seen.db = db;
    seen.runs.clear();
    seen.unseen.length = 0;
    worker = await startWorker(prefix, [OrderHandler], { concurrency: 32 });
    // Small relay batches, several order lanes: at any instant some committed rows wait for their relay.
    const env = { ...outboxAppEnv(orm, db, prefix, { batchSize: 20, pollMs: 50 }), LOAD: 6 };
    let leftWaiting = 0;
    let kills = 0;
    // Every app process alive, and whether a lane failed: the other stops too, and none outlives the test.
    const alive = new Set<WorkerProcess>();
    let failed = false;
    const lane = async (name: string): Promise<void> => {
      try {
        for (let i = 0; i < KILLS / 2 && !failed; i++) {
          const app = await startWorkerProcess(`${name}-${i}`, env, OUTBOX_APP);
          alive.add(app);
          await app.waitFor('COMMITTED', 20_000);
          // A random moment of the load, past its first commit.
          await new Promise((resolve) => setTimeout(resolve, 20 + Math.floor(Math.random() * 200)));
          await app.kill('SIGKILL');
          alive.delete(app);
          kills++;
          // Rows of this app's orders still waiting (its run id starts each of its order ids).
          const run = /COMMITTED ([0-9a-f]+)-/.exec(app.output)?.[1] ?? '-';
          const like = dialect === 'postgres' ? '$1' : '?';
          const [row] = await db.query(`SELECT count(*) AS n FROM ${db.outboxTable} WHERE fields LIKE ${like}`, [
            `%${run}-%`,
          ]);
          if (Number(row?.n) > 0) leftWaiting++;
        }
      } catch (error) {
        failed = true;
        throw error;
      }
    };
    stopAll = async () => {
      failed = true;
      await Promise.all([...alive].map((app) => app.kill('SIGKILL')));
    };
    const started = Date.now();
    const lanes = await Promise.allSettled([lane('a'), lane('b')]);
    for (const outcome of lanes) if (outcome.status === 'rejected') throw outcome.reason;
    console.log(`outbox chaos (${dialect}): ${kills} kills in ${Date.now() - started} ms`);
    expect(kills).toBe(KILLS);
    // A last app, placing nothing, relays what the killed ones left.
    const drainer = await startWorkerProcess('drainer', { ...env, LOAD: 0, RELAY_ONLY: 1 }, OUTBOX_APP);
    try {
      const orders = new Set(
        await waitFor(
          async () => {
            const [row] = await db.query(`SELECT count(*) AS n FROM ${db.outboxTable}`);
            return Number(row?.n) === 0 ? db.orders() : undefined;
          },
          'the outbox to be drained',
          { timeoutMs: 60_000 },
        ),
      );
      await waitFor(() => [...orders].every((id) => seen.runs.has(id)), 'every committed order to run', {
        timeoutMs: 60_000,
      });
      const lost = [...orders].filter((id) => !seen.runs.has(id));
      const repeated = [...seen.runs].filter(([, runs]) => runs > 1);
      const uncommitted = [...seen.runs.keys()].filter((id) => !orders.has(id));
      console.log(
        `outbox chaos (${dialect}): ${kills} kills, ${orders.size} orders committed, ${leftWaiting} kills left committed rows of the killed app waiting for a relay; lost ${lost.length}, repeated ${repeated.length}, ran uncommitted ${uncommitted.length}`,
      );
      expect({ lost, repeated, uncommitted, unseen: seen.unseen }).toEqual({
        lost: [],
        repeated: [],
        uncommitted: [],
        unseen: [],
      });
      expect(orders.size).toBeGreaterThan(KILLS);
      expect(leftWaiting).toBeGreaterThan(0);
    } finally {
      await drainer.kill('SIGTERM');
    }
  }, 600_000);
});
