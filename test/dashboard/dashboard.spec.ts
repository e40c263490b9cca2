import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import {
  Controller,
  Injectable,
  Module,
  type CanActivate,
  type ExecutionContext,
  type INestApplication,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Ctx, EventPattern, Payload } from '@nestjs/microservices';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { mkdirSync } from 'node:fs';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { firstValueFrom } from 'rxjs';
import { RedisTaskDashboardModule } from '../../lib/dashboard.js';
import {
  InvalidOptionError,
  RedisTaskAdmin,
  RedisTaskContext,
  RedisTaskRecordBuilder,
  type RedisTaskClient,
} from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { launchBrowser } from '../support/browser.js';
import { startProducer, startWorker, type Worker } from '../support/nest.js';
import { deleteKeys, openRedis, redisUrl, testPrefix, waitFor } from '../support/redis.js';

const redis = openRedis();
const runs: { pattern: string; payload: unknown }[] = [];
let failing = true;
let release: () => void = () => undefined;
let held = new Promise<void>((resolve) => (release = resolve));
const XSS_PATTERN = 'xss.<img src=x onerror="window.__xss=1">';
const XSS_PAYLOAD = '<script>window.__xss=2</script><img src=x onerror="window.__xss=3">';

@Controller()
class Handlers {
  @EventPattern<string>('dash.work')
  work(@Payload() payload: unknown): void {
    runs.push({ pattern: 'dash.work', payload });
  }

  @EventPattern<string>('dash.slow')
  async slow(@Payload() payload: unknown): Promise<void> {
    runs.push({ pattern: 'dash.slow', payload });
    await held;
  }

  /** Durable steps: one saved, a checkpoint, then a step that fails and waits ten minutes for its own retry. */
  @EventPattern<string>('dash.steps')
  async steps(@Ctx() ctx: RedisTaskContext): Promise<void> {
    await ctx.step('fetch', () => 1);
    await ctx.checkpoint({ page: 7 });
    await ctx.step(
      'upload',
      () => {
        throw new Error('the upload failed');
      },
      { attempts: 3, backoff: { type: 'fixed', delayMs: 600_000 } },
    );
  }

  @EventPattern<string>('dash.fail')
  fail(@Payload() payload: unknown): void {
    if (failing) throw new Error('<b>boom</b>');
    runs.push({ pattern: 'dash.fail', payload });
  }
}

/** The app's own auth, as a dashboard user would have it: here, a cookie saying the user is an admin. */
@Injectable()
class AdminGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest<{ headers: Record<string, string | undefined> }>();
    return (request.headers.cookie ?? '').split(/;\s*/).includes('role=admin');
  }
}

function appModule(prefix: string): unknown {
  @Module({
    imports: [
      RedisTaskDashboardModule.forRoot({
        path: 'admin/queues',
        connection: redisUrl(),
        prefix,
        actions: true,
        showPayloads: true,
        guard: AdminGuard,
        refreshMs: 1_000,
      }),
    ],
  })
  class AppModule {}
  return AppModule;
}

const rowOf = (page: Page, pattern: string) =>
  page
    .locator('tr[data-pattern]')
    .filter({ has: page.locator('td:first-child a', { hasText: pattern }) })
    .first();

async function cell(page: Page, pattern: string, field: string): Promise<string> {
  return (await rowOf(page, pattern).locator(`td[data-field="${field}"]`).textContent()) ?? '';
}

/**
 * Opens a route of the dashboard and waits until the view shows it: a hash change renders after its fetch, so an
 * action taken at once would land on the route before.
 */
async function visit(page: Page, base: string, route = ''): Promise<void> {
  await page.goto(base + route);
  await page.locator(`#view[data-route="${route || '#/'}"]`).waitFor({ state: 'attached' });
}

let browser: Browser;

beforeAll(async () => {
  browser = await launchBrowser();
});

afterAll(async () => {
  await browser?.close();
  redis.disconnect();
});

for (const adapter of ['express', 'fastify'] as const) {
  describe(`the dashboard on ${adapter}`, () => {
    const prefix = testPrefix(`dash-${adapter}`);
    const keys = new PrefixKeys(prefix);
    let worker: Worker;
    let client: RedisTaskClient;
    let closeProducer: () => Promise<void>;
    let app: INestApplication;
    let base: string;
    let context: BrowserContext;
    let page: Page;

    beforeAll(async () => {
      failing = true;
      runs.length = 0;
      worker = await startWorker(prefix, [Handlers], { maxAttempts: 1, clientConcurrency: 4 });
      const producer = await startProducer(prefix);
      client = producer.client;
      closeProducer = () => producer.module.close();
      app =
        adapter === 'express'
          ? await NestFactory.create(appModule(prefix) as never, { logger: false })
          : await NestFactory.create(appModule(prefix) as never, new FastifyAdapter(), { logger: false });
      await app.listen(0, '127.0.0.1');
      base = `${(await app.getUrl()).replace('[::1]', '127.0.0.1')}/admin/queues`;
      context = await browser.newContext({ viewport: { width: 1280, height: 720 } });
      await context.addCookies([{ name: 'role', value: 'admin', url: base }]);
      page = await context.newPage();
    });

    afterAll(async () => {
      await context?.close();
      await app?.close();
      await worker?.app.close();
      await closeProducer?.();
      await deleteKeys(redis, prefix);
    });

    it('shows every pattern with counts that match Redis, one that never had a worker included, and names as text', async () => {
      for (const [clientId, n] of [
        ['a', 1],
        ['a', 2],
        ['b', 3],
      ] as const) {
        await firstValueFrom(
          client.emit('dash.orphan', new RedisTaskRecordBuilder({ n }).setClientId(clientId).build()),
        );
      }
      await firstValueFrom(client.emit('dash.orphan', new RedisTaskRecordBuilder({ n: 4 }).setDelay(600_000).build()));
      await firstValueFrom(client.emit(XSS_PATTERN, { n: 5 }));
      await visit(page, base);
      const stats = await new RedisTaskAdmin(client).stats('dash.orphan');
      await waitFor(
        async () => (await cell(page, 'dash.orphan', 'pending')) === String(stats.pending.total),
        'the pending count on the page',
      );
      expect(stats.pending.total).toBe(3);
      expect(await cell(page, 'dash.orphan', 'delayed')).toBe(String(stats.delayed));
      expect(await rowOf(page, 'dash.orphan').textContent()).toContain('no worker');
      // The pattern whose name is markup is listed as text: no element made of it, no script run.
      expect(await rowOf(page, XSS_PATTERN).locator('td:first-child a').textContent()).toBe(XSS_PATTERN);
      expect(await page.locator('#view img').count()).toBe(0);
      expect(await page.evaluate(() => (globalThis as unknown as { __xss?: number }).__xss)).toBeUndefined();
      expect(await page.content()).not.toContain(prefix.length > 0 ? redisUrl() : 'never');
    });

    it('requeues a dead letter from the page, which then runs in the worker; its payload and error show as text', async () => {
      await firstValueFrom(client.emit('dash.fail', { html: XSS_PAYLOAD }));
      const dead = keys.queue('dash.fail').deadLetters;
      await waitFor(async () => (await redis.llen(dead)) === 1, 'the failing task to be dead-lettered');
      const [{ id }] = (await redis.lrange(dead, 0, -1)).map((raw) => JSON.parse(raw) as { id: string });
      await visit(page, base, `#/dead?name=dash.fail`);
      const row = page.locator(`tr[data-task="${id}"]`);
      await row.waitFor();
      expect(await row.locator('pre[data-field="payload"]').textContent()).toBe(
        JSON.stringify({ html: XSS_PAYLOAD }, null, 2),
      );
      expect(await row.textContent()).toContain('Error: <b>boom</b>');
      expect(await page.locator('#view b, #view script, #view img').count()).toBe(0);
      expect(await page.evaluate(() => (globalThis as unknown as { __xss?: number }).__xss)).toBeUndefined();

      failing = false;
      await row.locator('button[data-action="Requeue"]').click();
      await waitFor(() => runs.some((run) => run.pattern === 'dash.fail'), 'the requeued task to run in the worker');
      expect(runs.find((run) => run.pattern === 'dash.fail')?.payload).toEqual({ html: XSS_PAYLOAD });
      expect(await redis.llen(dead)).toBe(0);
      await page.getByTestId('message').filter({ hasText: 'Requeued 1' }).waitFor();
    });

    it('pauses and resumes a pattern from the page: claims stop, then start again', async () => {
      await firstValueFrom(client.emit('dash.work', { n: 0 }));
      await waitFor(() => runs.some((run) => run.pattern === 'dash.work'), 'the worker to run a first task');
      await visit(page, base);
      await rowOf(page, 'dash.work').getByTestId('toggle-pause').click();
      const paused = keys.queue('dash.work').paused;
      await waitFor(async () => (await redis.exists(paused)) === 1, 'the pattern to be paused in Redis');
      await rowOf(page, 'dash.work').locator('.badge.paused').waitFor();

      const before = runs.length;
      await firstValueFrom(client.emit('dash.work', { n: 1 }));
      await waitFor(
        async () => (await cell(page, 'dash.work', 'pending')) === '1',
        'the page to show the task waiting',
      );
      // Nothing claims it while paused: it is still waiting after several of the worker's wake-ups.
      for (let i = 0; i < 10; i++) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        expect(runs.length).toBe(before);
      }
      await rowOf(page, 'dash.work').getByTestId('toggle-pause').click();
      await waitFor(() => runs.length === before + 1, 'the task to run once resumed');
      expect(await redis.exists(paused)).toBe(0);
    });

    it('lists recurring schedules and pauses, resumes, triggers and removes one from the page (behind the guard)', async () => {
      const admin = new RedisTaskAdmin(client);
      await admin.upsertSchedule('dash-nightly', {
        pattern: 'dash.work',
        cron: '0 3 * * *',
        tz: 'Europe/Berlin',
        payload: { nightly: true },
      });
      await visit(page, base, `#/schedules`);
      const row = page.locator('tr[data-schedule="dash-nightly"]');
      await row.waitFor();
      expect(await row.textContent()).toContain('cron 0 3 * * * (Europe/Berlin)');
      expect(await row.locator('[data-field="state"]').textContent()).toBe('active');
      // Each button says what it does (the message after it says what was done).
      expect(await row.locator('button').allTextContents()).toEqual(['Pause', 'Trigger now', 'Remove']);
      await row.locator('button[data-action="pause"]').click();
      await waitFor(
        async () => (await admin.listSchedules())[0]?.paused === true,
        'the schedule to be paused in Redis',
      );
      await page.getByTestId('message').filter({ hasText: 'Paused dash-nightly' }).waitFor();
      expect(await row.locator('button[data-action="resume"]').textContent()).toBe('Resume');
      await row.locator('button[data-action="resume"]').click();
      await waitFor(async () => (await admin.listSchedules())[0]?.paused === false, 'the schedule to be resumed');
      const before = runs.length;
      await row.locator('button[data-action="trigger"]').click();
      await waitFor(
        () => runs.slice(before).some((run) => (run.payload as { nightly?: boolean }).nightly === true),
        'the triggered task to run in the worker',
      );
      page.once('dialog', (dialog) => void dialog.accept());
      await row.locator('button[data-action="remove"]').click();
      await waitFor(async () => (await admin.listSchedules()).length === 0, 'the schedule to be removed');
    });

    it('finds a tracked task by id from its pattern page, shows where it is, and cancels it (behind the guard)', async () => {
      const admin = new RedisTaskAdmin(client);
      const receipt = await firstValueFrom(
        client.emit<{ id: string }>(
          'dash.work',
          new RedisTaskRecordBuilder({ later: true }).setTracked().setDelay(600_000).build(),
        ),
      );
      await visit(page, base, `#/pattern?name=dash.work&group=default`);
      await page.getByTestId('task-id').fill(receipt.id);
      await page.getByTestId('find-task').click();
      const state = page.getByTestId('task').locator('tr[data-field="State"] td');
      await state.waitFor();
      expect(await state.textContent()).toBe('delayed');
      expect(await page.getByTestId('task').locator('tr[data-field="Why"] td').textContent()).toBe('delay');
      page.once('dialog', (dialog) => void dialog.accept());
      await page.locator('button[data-action="cancel-task"]').click();
      await page
        .getByTestId('message')
        .filter({ hasText: `Cancelled ${receipt.id} (it was delayed)` })
        .waitFor();
      expect(await admin.getTask('dash.work', receipt.id)).toMatchObject({ state: 'cancelled', was: 'delayed' });
      await waitFor(async () => (await state.textContent()) === 'cancelled', 'the page to show it cancelled');
      await page.getByTestId('task-id').fill('no-such-task');
      await page.getByTestId('find-task').click();
      await page.getByTestId('task-unknown').waitFor();
    });

    it("shows a tracked task's durable steps: how many are done, and its checkpoint", async () => {
      const admin = new RedisTaskAdmin(client);
      const receipt = await firstValueFrom(
        client.emit<{ id: string }>('dash.steps', new RedisTaskRecordBuilder({}).setTracked().build()),
      );
      await waitFor(async () => {
        const task = await admin.getTask('dash.steps', receipt.id);
        return task.state === 'delayed' && task.steps?.done === 1;
      }, 'the task to wait for its step to run again, one step done');
      await visit(page, base, `#/pattern?name=dash.steps&group=default`);
      await page.getByTestId('task-id').fill(receipt.id);
      await page.getByTestId('find-task').click();
      const field = (name: string) => page.getByTestId('task').locator(`tr[data-field="${name}"] td`);
      await field('State').waitFor();
      expect(await field('Steps done').textContent()).toBe('1');
      expect(await field('Checkpoint').textContent()).toBe('{"page":7}');
    });

    it('finds a batch by id from the overview, shows its counts, and cancels it', async () => {
      const admin = new RedisTaskAdmin(client);
      const batch = client.batch({ id: 'dash-batch', onComplete: { pattern: 'dash.work' } });
      await batch.add('dash.work', [
        new RedisTaskRecordBuilder({ later: 1 }).setDelay(600_000).build(),
        new RedisTaskRecordBuilder({ later: 2 }).setDelay(600_000).build(),
      ]);
      await visit(page, base);
      await page.getByTestId('batch-id').fill('dash-batch');
      await page.getByTestId('find-batch').click();
      const field = (name: string) => page.getByTestId('batch').locator(`tr[data-field="${name}"] td`);
      await field('State').waitFor();
      expect(await field('State').textContent()).toBe('open');
      expect(await field('Pending').textContent()).toBe('2');
      expect(await field('Callback').textContent()).toBe('waiting');
      page.once('dialog', (dialog) => void dialog.accept());
      await page.locator('button[data-action="cancel-batch"]').click();
      await page
        .getByTestId('message')
        .filter({ hasText: 'Cancelled batch dash-batch: 2 waiting removed, 0 running stopped' })
        .waitFor();
      expect(await admin.getBatch('dash-batch')).toMatchObject({ state: 'cancelled' });
      await waitFor(async () => (await field('State').textContent()) === 'cancelled', 'the page to show it cancelled');
      await page.getByTestId('batch-id').fill('no-such-batch');
      await page.getByTestId('find-batch').click();
      await page.getByTestId('batch-unknown').waitFor();
    });

    it('finds a flow by id, draws its graph with the state of each node, and cancels it', async () => {
      const admin = new RedisTaskAdmin(client);
      held = new Promise<void>((resolve) => (release = resolve));
      await client.flow({
        id: 'dash-flow',
        nodes: [
          { id: 'first', pattern: 'dash.work', payload: { step: 1 } },
          { id: 'slow', pattern: 'dash.slow', payload: { step: 2 }, deps: ['first'] },
          { id: 'last', pattern: 'dash.work', payload: { step: 3 }, deps: ['slow'], onParentFailure: 'skip' },
        ],
      });
      await waitFor(() => runs.some((run) => run.pattern === 'dash.slow'), 'the slow node to run');
      await visit(page, base);
      await page.getByTestId('flow-id').fill('dash-flow');
      await page.getByTestId('find-flow').click();
      const graph = page.getByTestId('flow-graph');
      const stateOf = (node: string) => graph.locator(`g[data-node="${node}"]`).getAttribute('data-state');
      await graph.locator('g[data-node="last"]').waitFor();
      expect([await stateOf('first'), await stateOf('slow'), await stateOf('last')]).toEqual([
        'succeeded',
        'released',
        'waiting',
      ]);
      // Two lines, one from each parent to its child.
      expect(await graph.locator('line').count()).toBe(2);
      const row = (node: string) => page.getByTestId('flow-nodes').locator(`tr[data-node="${node}"] td`);
      expect(await row('last').nth(3).textContent()).toBe('slow (skip)');
      expect(await row('first').nth(4).textContent()).toBe('null');
      page.once('dialog', (dialog) => void dialog.accept());
      await page.locator('button[data-action="cancel-flow"]').click();
      await page
        .getByTestId('message')
        .filter({ hasText: 'Cancelled flow dash-flow: 1 released node(s) stopped' })
        .waitFor();
      await waitFor(async () => (await admin.getFlow('dash-flow')).ended, 'the flow to end');
      expect(await admin.getFlow('dash-flow')).toMatchObject({
        state: 'cancelled',
        reason: 'cancelled (from the dashboard)',
      });
      await waitFor(async () => (await stateOf('slow')) === 'cancelled', 'the page to show the slow node cancelled');
      expect(await stateOf('last')).toBe('cancelled');
      release();
      await page.getByTestId('flow-id').fill('no-such-flow');
      await page.getByTestId('find-flow').click();
      await page.getByTestId('flow-unknown').waitFor();
    });

    it('refuses a POST the guard does not approve, without the CSRF token, or from another origin, and changes nothing', async () => {
      await visit(page, base);
      const token = await page.locator('meta[name="csrf-token"]').getAttribute('content');
      expect(token).toBeTruthy();
      const origin = new URL(base).origin;
      const post = (path: string, headers: Record<string, string>, body: unknown) =>
        fetch(`${base}/api/${path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...headers },
          body: JSON.stringify(body),
        });
      const admin = { cookie: 'role=admin' };
      const pause = { name: 'dash.work' };
      const refused = [
        await post('pause', { origin, 'x-csrf-token': token as string }, pause), // no cookie: the guard says no
        await post('pause', { ...admin, origin }, pause), // no token
        await post('pause', { ...admin, origin, 'x-csrf-token': 'forged.token.value' }, pause),
        await post('pause', { ...admin, origin: 'http://evil.example', 'x-csrf-token': token as string }, pause),
        await post('pause', { ...admin, 'x-csrf-token': token as string }, pause), // neither Origin nor Referer
        await post('dead-letters/purge', { ...admin, origin }, { name: 'dash.fail', all: true }),
        await post('schedules/action', { ...admin, origin }, { id: 'any', action: 'remove' }), // no token
        await post('task/cancel', { ...admin, origin }, { name: 'dash.work', id: 'any' }), // no token
        await post(
          'batch/cancel',
          { ...admin, origin: 'http://evil.example', 'x-csrf-token': token as string },
          { id: 'any' },
        ),
        await post('flow/cancel', { ...admin, origin }, { id: 'any' }), // no token
      ];
      expect(refused.map((response) => response.status)).toEqual([403, 403, 403, 403, 403, 403, 403, 403, 403, 403]);
      expect(await redis.exists(keys.queue('dash.work').paused)).toBe(0);
      // The same request with all it needs goes through (so the refusals were about what they lacked).
      const allowed = await post('pause', { ...admin, origin, 'x-csrf-token': token as string }, pause);
      expect(allowed.status).toBe(200);
      expect(await redis.exists(keys.queue('dash.work').paused)).toBe(1);
      await post('resume', { ...admin, origin, 'x-csrf-token': token as string }, pause);
      // Reads need the guard's approval too; bad input is a 400, an unknown pattern a 404.
      expect((await fetch(`${base}/api/overview`)).status).toBe(403);
      expect((await fetch(`${base}/api/dead-letters?name=dash.fail&reason=nonsense`, { headers: admin })).status).toBe(
        400,
      );
      expect((await fetch(`${base}/api/pattern?name=nope`, { headers: admin })).status).toBe(404);
    });

    it('filters dead letters by client and reason, and purges a selection, then all that match', async () => {
      failing = true;
      const dead = keys.queue('dash.fail').deadLetters;
      const before = await redis.llen(dead);
      for (const clientId of ['x', 'x', 'x', 'y'])
        await firstValueFrom(
          client.emit('dash.fail', new RedisTaskRecordBuilder({ clientId }).setClientId(clientId).build()),
        );
      await waitFor(async () => (await redis.llen(dead)) === before + 4, 'four dead letters');
      page.on('dialog', (dialog) => void dialog.accept());
      await visit(page, base, `#/dead?name=dash.fail&clientId=x&reason=failed`);
      const rows = page.getByTestId('dead-letters').locator('tbody tr');
      await waitFor(async () => (await rows.count()) === 3, 'the three dead letters of client x');
      await rows.first().locator('input[type="checkbox"]').check();
      // Deleting for good sits apart from requeueing: its own bar, below the list.
      const dangerZone = page.getByTestId('danger-zone');
      expect(await dangerZone.locator('button').allTextContents()).toEqual(['Purge selected', 'Purge all matching']);
      expect(await dangerZone.locator('button', { hasText: 'Requeue' }).count()).toBe(0);
      const requeueAll = await page.locator('button[data-action="Requeue all matching"]').boundingBox();
      const purgeAll = await page.locator('button[data-action="Purge all matching"]').boundingBox();
      expect(purgeAll!.y).toBeGreaterThan(requeueAll!.y + 40);
      await page.locator('button[data-action="Purge selected"]').click();
      await waitFor(async () => (await redis.llen(dead)) === before + 3, 'the selected dead letter to be purged');
      await waitFor(async () => (await rows.count()) === 2, 'the page to show the two left');
      await page.locator('button[data-action="Purge all matching"]').click();
      await waitFor(async () => (await redis.llen(dead)) === before + 1, 'the dead letters of client x to be purged');
      const [left] = (await redis.lrange(dead, 0, 0)).map((raw) => JSON.parse(raw) as { clientId: string });
      expect(left.clientId).toBe('y');
      failing = false;
    });

    it("shows a pattern's waiting clients, and its workers with their liveness and what each runs", async () => {
      held = new Promise<void>((resolve) => (release = resolve));
      const receipt = (await firstValueFrom(client.emit('dash.slow', { n: 1 }))) as { id: string };
      await waitFor(() => runs.some((run) => run.pattern === 'dash.slow'), 'the slow task to start');
      const table = async (testId: string) =>
        page
          .getByTestId(testId)
          .locator('tbody tr')
          .evaluateAll((rows) =>
            rows.map((row) =>
              Array.from(
                (row as { children: ArrayLike<{ textContent: string | null }> }).children,
                (cell) => cell.textContent ?? '',
              ),
            ),
          );
      await visit(page, base, `#/pattern?name=dash.orphan`);
      await page.getByTestId('clients').waitFor();
      expect((await table('clients')).map((row) => row.slice(0, 3))).toEqual([
        ['a', 'ready', '2'],
        ['b', 'ready', '1'],
      ]);
      // A pattern no worker consumes says so, in the word the CLI uses, with its headline counts.
      const orphan = await new RedisTaskAdmin(client).stats('dash.orphan');
      expect(orphan.state).toBe('no worker');
      expect(await page.getByTestId('no-workers').textContent()).toBe(
        'No worker consumes this pattern: its tasks wait until one starts.',
      );
      expect(await page.getByTestId('workers').count()).toBe(0);
      const headline = page.getByTestId('headline');
      expect(await headline.locator('[data-field="pending"]').textContent()).toBe(String(orphan.pending.total));
      expect(await headline.locator('[data-field="delayed"]').textContent()).toBe(String(orphan.delayed));
      expect(await headline.locator('[data-field="state"]').textContent()).toBe('no worker');
      expect(await page.locator('h1 [data-testid="state"]').textContent()).toBe('no worker');
      await visit(page, base, `#/pattern?name=dash.slow`);
      await page.getByTestId('workers').locator('tbody tr').first().waitFor();
      expect(await page.getByTestId('clients').locator('thead').textContent()).toContain('In flight (cap 4)');
      expect(await page.getByTestId('headline').locator('[data-field="state"]').textContent()).toBe('running');
      expect(await page.getByTestId('headline').locator('[data-field="inFlight"]').textContent()).toBe('1');
      const [worker] = await table('workers');
      const [registered] = await new RedisTaskAdmin(client).workers('dash.slow');
      expect(worker[0]).toBe(registered.workerId);
      expect(worker[1]).toBe('alive');
      expect(worker[3]).toBe('1');
      expect(worker[4]).toContain(receipt.id);
      release();
      // The pattern's chart: completed, failed attempts and dead-lettered per minute over the last hour, with
      // both axes labelled, a legend, and a hover value per minute that agrees with the headline.
      await visit(page, base, `#/pattern?name=dash.fail`);
      const chart = page.getByTestId('rates-chart');
      await chart.waitFor();
      expect(await chart.locator('.legend').textContent()).toBe('completedfailed attemptsdead-lettered');
      const axis = await chart.locator('.axis text').allTextContents();
      expect(axis).toEqual(expect.arrayContaining(['-60 min', '-30 min', 'now']));
      expect(await chart.locator('polyline').count()).toBe(3);
      const failHeadline = page.getByTestId('headline');
      const deadNow = Number(await failHeadline.locator('[data-field="deadLetters"]').textContent());
      expect(deadNow).toBeGreaterThan(0);
      const hovers = await chart.locator('rect.hover title').allTextContents();
      expect(hovers.length).toBeGreaterThan(0);
      // The dead letters of this run were dead-lettered within the last hour: the chart counts them.
      const charted = hovers
        .map((text) => Number(/dead-lettered: ([\d.,]+)/.exec(text)?.[1].replace(',', '') ?? 0))
        .reduce((sum, n) => sum + n, 0);
      expect(Math.round(charted)).toBeGreaterThanOrEqual(deadNow);
      expect(await page.getByTestId('oldest-chart').locator('.legend').textContent()).toBe('oldest waiting');
      // The reapers record the counters each minute, for the chart.
      await waitFor(
        async () => (await redis.hlen(keys.queue('dash.slow').history)) >= 1,
        'the counters of the minute to be recorded',
      );
    });

    if (adapter === 'express') {
      it('saves screenshots of the overview and a pattern page (used in the README)', async () => {
        await visit(page, base);
        await rowOf(page, 'dash.work').waitFor();
        mkdirSync('docs', { recursive: true });
        await page.screenshot({ path: 'docs/dashboard.png' });
        await visit(page, base, `#/pattern?name=dash.fail`);
        await page.getByTestId('rates-chart').waitFor();
        await page.screenshot({ path: 'docs/dashboard-pattern.png', fullPage: true });
      });
    }
  });
}

describe('RedisTaskDashboardModule options', () => {
  it('refuses actions without a guard at definition, unless opted out by name', async () => {
    expect(() => RedisTaskDashboardModule.forRoot({ actions: true })).toThrow(InvalidOptionError);
    expect(() => RedisTaskDashboardModule.forRoot({ actions: true })).toThrow(/option "actions" needs option "guard"/);
    expect(() => RedisTaskDashboardModule.forRoot({ actions: true, allowActionsWithoutGuard: true })).not.toThrow();
    expect(() => RedisTaskDashboardModule.forRoot({ refreshMs: 10 })).toThrow(/option "refreshMs"/);
    expect(() => RedisTaskDashboardModule.forRoot({ path: '../x' })).toThrow(/option "path"/);

    @Module({
      imports: [
        RedisTaskDashboardModule.forRootAsync({ useFactory: () => ({ actions: true, connection: redisUrl() }) }),
      ],
    })
    class AsyncModule {}
    await expect(NestFactory.create(AsyncModule, { logger: false, abortOnError: false })).rejects.toThrow(
      /option "actions" needs option "guard"/,
    );
  });
});
