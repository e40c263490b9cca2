/**
 * Operating the outbox: an app (HTTP, with metrics, the Terminus indicator and the dashboard) whose relay is
 * off, so its committed rows wait; then a relaying app moves them. The metrics, the health check and the
 * dashboard (in Chromium) show the rows waiting and their age, and then the table empty.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { Browser } from 'playwright-core';
import { launchBrowser } from '../support/browser.js';
import { createDatabase, type TestDatabase } from '../support/databases.js';
import { startWorker, type Worker } from '../support/nest.js';
import { deleteKeys, openRedis, testPrefix, waitFor } from '../support/redis.js';
import { OrderHandler, outboxAppEnv, seen, startOutboxApp, type OutboxAppProcess } from './outbox-process.js';

const redis = openRedis();

/** A metric's value in Prometheus' text format. */
function metric(text: string, name: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.split(' ')[1]);
}

describe('operating the outbox', () => {
  let db: TestDatabase;
  let worker: Worker;
  let browser: Browser;
  let prefix: string;
  const apps: OutboxAppProcess[] = [];

  beforeAll(async () => {
    db = await createDatabase('postgres');
    seen.db = db;
    prefix = testPrefix('outbox-ops');
    worker = await startWorker(prefix, [OrderHandler]);
    browser = await launchBrowser();
  });

  afterAll(async () => {
    await browser?.close();
    for (const app of apps) await app.close();
    await worker?.app.close();
    await db?.drop();
    await deleteKeys(redis, prefix);
    redis.disconnect();
    seen.runs.clear();
  });

  it('shows rows waiting and their age in metrics, health and the dashboard, then the table drained', async () => {
    const ops = await startOutboxApp({ ...outboxAppEnv('typeorm', db, prefix, { relay: false }), HTTP: '1' });
    apps.push(ops);
    for (let i = 0; i < 3; i++) await ops.call('place', `o-ops-${i}`);
    await waitFor(async () => (await ops.call<{ lagMs: number }>('stats')).lagMs >= 300, 'the rows to wait 300 ms');

    const metrics = await ops.call<string>('metrics');
    expect(metric(metrics, 'redis_tasks_outbox_depth')).toBe(3);
    expect(metric(metrics, 'redis_tasks_outbox_lag_seconds')).toBeGreaterThanOrEqual(0.3);
    expect(metric(metrics, 'redis_tasks_outbox_rejected')).toBe(0);

    const stuck = await ops.call<Record<string, { status: string; outbox?: unknown; message?: string }>>('health', 100);
    expect(stuck.tasks.status).toBe('down');
    expect(stuck.tasks.outbox).toMatchObject({ depth: 3 });
    expect(stuck.tasks.message).toMatch(/oldest outbox row has waited \d+ ms/);
    expect((await ops.call<Record<string, { status: string }>>('health', 600_000)).tasks.status).toBe('up');

    const page = await browser.newPage();
    try {
      await page.goto(`http://127.0.0.1:${ops.port}/queues`);
      const panel = page.getByTestId('outbox');
      await waitFor(
        async () => (await panel.locator('[data-field=depth]').textContent()) === '3',
        'the dashboard to show 3 rows',
      );
      expect(await panel.locator('[data-field=relayed]').textContent()).toBe('no relay here');
      expect(await panel.locator('[data-field=lag]').textContent()).toMatch(/\d/);

      // A relaying app moves them: every view shows the table empty.
      apps.push(await startOutboxApp(outboxAppEnv('typeorm', db, prefix)));
      await waitFor(() => [0, 1, 2].every((i) => seen.runs.get(`o-ops-${i}`) === 1), 'the waiting tasks to run');
      await page.reload();
      await waitFor(
        async () => (await panel.locator('[data-field=depth]').textContent()) === '0',
        'the dashboard to show 0 rows',
      );
      expect(metric(await ops.call<string>('metrics'), 'redis_tasks_outbox_depth')).toBe(0);
      expect((await ops.call<Record<string, { status: string }>>('health', 100)).tasks.status).toBe('up');
    } finally {
      await page.close();
    }
  });
});
