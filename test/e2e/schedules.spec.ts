import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { Ctx, EventPattern, Payload } from '@nestjs/microservices';
import {
  InvalidScheduleError,
  RedisTaskAdmin,
  RedisTaskContext,
  TaskSchedule,
  type ScheduleTickEvent,
} from '../../lib/index.js';
import { startProducer, startWorker } from '../support/nest.js';
import { deleteKeys, gate, openRedis, testPrefix, waitFor } from '../support/redis.js';

const redis = openRedis();
const started: { close(): Promise<unknown> }[] = [];
let prefix = '';
const runs: { id: string; payload: unknown; workerId: string }[] = [];
let slow = gate();
let running = 0;
let overlapped = false;

@Controller()
class Reports {
  @TaskSchedule('pulse', { everyMs: 200, payload: { kind: 'pulse' }, overlap: 'allow' })
  @EventPattern<string>('report.pulse')
  pulse(@Payload() payload: unknown, @Ctx() ctx: RedisTaskContext): void {
    runs.push({ id: ctx.getTaskId(), payload, workerId: ctx.getWorkerId() });
  }
}

@Controller()
class SlowSync {
  @EventPattern<string>('sync.slow')
  @TaskSchedule('slow-sync', { everyMs: 100 })
  async sync(@Ctx() ctx: RedisTaskContext): Promise<void> {
    if (running > 0) overlapped = true;
    running++;
    runs.push({ id: ctx.getTaskId(), payload: null, workerId: ctx.getWorkerId() });
    await slow.promise;
    running--;
  }
}

@Controller()
class NoSchedules {
  @EventPattern<string>('report.pulse')
  pulse(@Payload() payload: unknown, @Ctx() ctx: RedisTaskContext): void {
    runs.push({ id: ctx.getTaskId(), payload, workerId: ctx.getWorkerId() });
  }
}

@Controller()
class Twice {
  @TaskSchedule('same', { everyMs: 1_000 })
  @EventPattern<string>('a')
  a(): void {}

  @TaskSchedule('same', { everyMs: 1_000 })
  @EventPattern<string>('b')
  b(): void {}
}

@Controller()
class Invalid {
  @TaskSchedule('broken', { cron: '61 * * * *' })
  @EventPattern<string>('c')
  c(): void {}
}

afterEach(async () => {
  await Promise.all(started.splice(0).map((app) => app.close()));
  slow.open();
  await deleteKeys(redis, prefix);
  runs.length = 0;
  running = 0;
  overlapped = false;
  slow = gate();
});

afterAll(async () => {
  await redis.quit();
});

async function worker(controllers: unknown[], workerId: string, events?: ScheduleTickEvent[]) {
  const app = await startWorker(prefix, controllers as never[], { workerId, concurrency: 4 });
  if (events) app.transport.on('schedule', (event) => events.push(event));
  started.push(app.app);
  return app;
}

async function admin(): Promise<RedisTaskAdmin> {
  const { module } = await startProducer(prefix, {});
  started.push(module);
  return module.get(RedisTaskAdmin);
}

describe('@TaskSchedule and the admin API (Nest, real Redis)', () => {
  it('stores the decorated schedule once for three workers, and each tick runs once, on one of them', async () => {
    prefix = testPrefix('sched-decorator');
    const events: ScheduleTickEvent[] = [];
    await Promise.all(['w1', 'w2', 'w3'].map((id) => worker([Reports], id, events)));
    await waitFor(() => runs.length >= 10, 'ten ticks run', { timeoutMs: 15_000 });
    const tasks = await (await admin()).listSchedules();
    expect(tasks).toHaveLength(1);
    expect(tasks[0]).toMatchObject({ id: 'pulse', source: 'code', version: 1, spec: { pattern: 'report.pulse' } });
    const ids = runs.map((run) => run.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect(runs.every((run) => (run.payload as { kind: string }).kind === 'pulse')).toBe(true);
    const ticks = ids.map((id) => Date.parse(id.slice('pulse@'.length))).sort((a, b) => a - b);
    for (let i = 1; i < ticks.length; i++) expect(ticks[i] - ticks[i - 1]).toBe(200);
    // Each tick told once, by the process that handled it.
    const fired = events.filter((event) => event.outcome === 'fired').map((event) => event.taskId);
    expect(new Set(fired).size).toBe(fired.length);
  });

  it("with overlap 'skip' (the default), a slow handler's next ticks produce nothing until it ends", async () => {
    prefix = testPrefix('sched-overlap');
    const events: ScheduleTickEvent[] = [];
    await worker([SlowSync], 'w1', events);
    await waitFor(() => events.filter((event) => event.outcome === 'skipped').length >= 3, 'skipped ticks');
    expect(runs).toHaveLength(1);
    slow.open();
    await waitFor(() => runs.length >= 2, 'the next tick after the run ended');
    expect(overlapped).toBe(false);
    const listed = (await (await admin()).listSchedules())[0];
    expect(listed.state.skipped).toBeGreaterThanOrEqual(3);
  });

  it('marks orphaned, and stops firing, a decorated schedule whose decorator left the code', async () => {
    prefix = testPrefix('sched-orphan');
    const first = await worker([Reports], 'w1');
    await waitFor(() => runs.length >= 1, 'a tick');
    await first.app.close();
    started.splice(started.indexOf(first.app), 1);
    await worker([NoSchedules], 'w2');
    const api = await admin();
    const [orphan] = await api.listSchedules();
    expect(orphan).toMatchObject({ id: 'pulse', orphaned: true, nextTicks: [] });
    const before = runs.length;
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect(runs.length).toBe(before); // three ticks' time: none fired
    expect(await api.removeSchedule('pulse')).toBe(true);
    expect(await api.listSchedules()).toEqual([]);
  });

  it('refuses a worker whose decorators declare an invalid schedule or one id twice, naming it', async () => {
    prefix = testPrefix('sched-invalid');
    await expect(worker([Invalid], 'w1')).rejects.toThrow(InvalidScheduleError);
    await expect(worker([Invalid], 'w2')).rejects.toThrow(/schedule "broken" "cron" is not a cron expression/);
    await expect(worker([Twice], 'w3')).rejects.toThrow(/schedule "same" is declared twice/);
    expect(await redis.exists(`${prefix}:{%S}:schedules`)).toBe(0);
  });

  it('upserts, pauses, resumes, triggers and removes through RedisTaskAdmin', async () => {
    prefix = testPrefix('sched-admin');
    const api = await admin();
    expect(
      await api.upsertSchedule('daily', { pattern: 'report.pulse', cron: '0 6 * * *', tz: 'America/New_York' }),
    ).toBe('created');
    await worker([NoSchedules], 'w1');
    expect((await api.listSchedules())[0]).toMatchObject({ id: 'daily', source: 'api', orphaned: false });
    await api.pauseSchedule('daily');
    expect((await api.listSchedules())[0].paused).toBe(true);
    await api.resumeSchedule('daily');
    const triggered = await api.triggerSchedule('daily');
    expect(triggered.fired).toBe(true);
    await waitFor(() => runs.length === 1, 'the triggered run');
    expect(runs[0].id).toBe((triggered as { taskId: string }).taskId);
    expect(await api.removeSchedule('daily')).toBe(true);
  });
});
