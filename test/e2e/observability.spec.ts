import { execFile } from 'node:child_process';
import { resolve } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { Ctx, EventPattern, Payload } from '@nestjs/microservices';
import { HealthCheckService } from '@nestjs/terminus';
import { type TestingModule } from '@nestjs/testing';
import { firstValueFrom } from 'rxjs';
import {
  NonRetryableTaskError,
  RedisTaskAdmin,
  RedisTaskClient,
  RedisTaskContext,
  RedisTaskRecordBuilder,
} from '../../lib/index.js';
import { RedisTaskMetrics } from '../../lib/metrics.js';
import { RedisTaskHealthIndicator } from '../../lib/terminus.js';
import { startWorker, startOpsModule } from '../support/nest.js';
import { deleteKeys, openRedis, testPrefix, waitFor } from '../support/redis.js';

const redis = openRedis();
const started: { close(): Promise<unknown> }[] = [];
let prefix = '';
let handled = 0;

@Controller()
class Handlers {
  @EventPattern<string>('obs.work')
  async work(@Payload() payload: { fail?: boolean }): Promise<void> {
    if (payload.fail) throw new NonRetryableTaskError('no');
    await new Promise((resolve) => setTimeout(resolve, 2));
    handled++;
  }

  @EventPattern<string>('obs.steps')
  async steps(@Ctx() ctx: RedisTaskContext): Promise<void> {
    for (let step = 1; step <= 3; step++) await ctx.progress({ step });
    handled++;
  }
}

async function app(): Promise<TestingModule> {
  prefix = testPrefix('obs');
  const module = await startOpsModule({ prefix, reaperIntervalMs: false });
  started.push(module);
  return module;
}

afterEach(async () => {
  await Promise.all(started.splice(0).map((closable) => closable.close()));
  await deleteKeys(redis, prefix);
  handled = 0;
});

afterAll(async () => {
  await redis.quit();
});

function sample(text: string, metric: string, labels: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${metric}{${labels}}`));
  return line === undefined ? undefined : Number(line.split(' ').at(-1));
}

describe('Prometheus metrics (nestjs-redis-tasks/metrics)', () => {
  it('reports queue gauges read at scrape time, and outcomes and handler durations of an observed transport', async () => {
    const module = await app();
    const metrics = module.get(RedisTaskMetrics);
    const client = module.get(RedisTaskClient);
    await client.emitBatch(
      'obs.work',
      Array.from({ length: 12 }, (_, n) => new RedisTaskRecordBuilder({ n }).setClientId(`c${n % 3}`).build()),
    );
    await client.emitBatch('obs.work', [new RedisTaskRecordBuilder({}).setDelay(60_000).build()]);
    const { transport } = await startWorker(prefix, [Handlers], { concurrency: 1, prefetch: 1 });
    started.push(transport);
    metrics.observe(transport);
    await firstValueFrom(client.emit('obs.work', { fail: true }));
    await waitFor(() => handled === 12, 'the twelve tasks');
    await waitFor(
      async () =>
        sample(
          await metrics.registry.metrics(),
          'redis_tasks_outcomes_total',
          'queue="obs.work",outcome="dead-lettered"',
        ) === 1,
      'the dead-letter outcome',
    );
    const text = await metrics.registry.metrics();
    expect(sample(text, 'redis_tasks_queue_depth', 'queue="obs.work"')).toBe(0);
    expect(sample(text, 'redis_tasks_delayed', 'queue="obs.work"')).toBe(1);
    expect(sample(text, 'redis_tasks_dead_letters', 'queue="obs.work"')).toBe(1);
    expect(sample(text, 'redis_tasks_paused', 'queue="obs.work"')).toBe(0);
    expect(sample(text, 'redis_tasks_outcomes_total', 'queue="obs.work",outcome="completed"')).toBe(12);
    expect(sample(text, 'redis_tasks_handler_duration_seconds_count', 'queue="obs.work",outcome="completed"')).toBe(12);
    expect(
      sample(text, 'redis_tasks_handler_duration_seconds_bucket', 'le="0.001",queue="obs.work",outcome="completed"'),
    ).toBe(0);
  });

  it('counts the progress values handlers reported, per pattern', async () => {
    const module = await app();
    const metrics = module.get(RedisTaskMetrics);
    const client = module.get(RedisTaskClient);
    const { transport } = await startWorker(prefix, [Handlers]);
    started.push(transport);
    metrics.observe(transport);
    await client.emitBatch('obs.steps', [{}, {}]);
    await waitFor(() => handled === 2, 'the two tasks');
    expect(sample(await metrics.registry.metrics(), 'redis_tasks_progress_reports_total', 'queue="obs.steps"')).toBe(6);
  });

  it('counts the ticks of every recurring schedule by outcome, as recorded in Redis (whichever process fired them)', async () => {
    const module = await app();
    const metrics = module.get(RedisTaskMetrics);
    const admin = module.get(RedisTaskAdmin);
    // The pattern was used (its shard count on record) but no worker runs its tasks: the first tick fires, the
    // next ones are skipped (overlap: 'skip'). A schedule of a pattern nobody used holds its ticks.
    await firstValueFrom(module.get(RedisTaskClient).emit('obs.work', {}));
    await admin.upsertSchedule('obs-pulse', { pattern: 'obs.work', everyMs: 100 });
    await admin.upsertSchedule('obs-unused', { pattern: 'obs.nobody', everyMs: 100 });
    const { transport } = await startWorker(prefix, [], { workerId: 'ticker-only' });
    started.push(transport);
    await waitFor(
      async () =>
        (sample(
          await metrics.registry.metrics(),
          'redis_tasks_schedule_ticks_total',
          'schedule="obs-pulse",outcome="skipped"',
        ) ?? 0) >= 2,
      'skipped ticks counted',
    );
    const text = await metrics.registry.metrics();
    expect(sample(text, 'redis_tasks_schedule_ticks_total', 'schedule="obs-pulse",outcome="fired"')).toBe(1);
    await waitFor(
      async () =>
        (sample(
          await metrics.registry.metrics(),
          'redis_tasks_schedule_ticks_total',
          'schedule="obs-unused",outcome="held"',
        ) ?? 0) >= 1,
      'held ticks counted',
    );
  });

  it('counts the batches opened and completed, as recorded in Redis', async () => {
    const module = await app();
    const metrics = module.get(RedisTaskMetrics);
    const client = module.get(RedisTaskClient);
    const { transport } = await startWorker(prefix, [Handlers], { reaperIntervalMs: 50 });
    started.push(transport);
    await client.emitBatch('obs.work', [{}, {}], { batch: { onComplete: { pattern: 'obs.work' } } });
    const open = client.batch({ onComplete: { pattern: 'obs.work' } });
    await open.add('obs.work', [{}]);
    await waitFor(
      async () => sample(await metrics.registry.metrics(), 'redis_tasks_batches_total', 'outcome="completed"') === 1,
      'the completed batch counted',
    );
    expect(sample(await metrics.registry.metrics(), 'redis_tasks_batches_total', 'outcome="opened"')).toBe(2);
  });

  it('counts the flows created and ended, by state, as recorded in Redis', async () => {
    const module = await app();
    const metrics = module.get(RedisTaskMetrics);
    const client = module.get(RedisTaskClient);
    const { transport } = await startWorker(prefix, [Handlers], { reaperIntervalMs: 50 });
    started.push(transport);
    await client.flow({
      nodes: [
        { id: 'a', pattern: 'obs.work', payload: {} },
        { id: 'b', pattern: 'obs.work', payload: {}, deps: ['a'] },
      ],
    });
    await client.flow({ nodes: [{ id: 'a', pattern: 'obs.idle' }] });
    await waitFor(
      async () => sample(await metrics.registry.metrics(), 'redis_tasks_flows_total', 'outcome="succeeded"') === 1,
      'the flow that ended counted',
    );
    expect(sample(await metrics.registry.metrics(), 'redis_tasks_flows_total', 'outcome="created"')).toBe(2);
    expect(sample(await metrics.registry.metrics(), 'redis_tasks_flows_total', 'outcome="failed"')).toBe(0);
  });

  it('leaves the main entry point loadable without prom-client or @nestjs/terminus installed', async () => {
    // A child process whose module resolution refuses both packages, as if they were not installed.
    const refuse = `data:text/javascript,export async function resolve(specifier, context, next) {
      if (specifier === 'prom-client' || specifier.startsWith('@nestjs/terminus')) {
        throw Object.assign(new Error('Cannot find package ' + specifier), { code: 'ERR_MODULE_NOT_FOUND' });
      }
      return next(specifier, context);
    }`;
    const entry = resolve('.chaos-build/lib/index.js');
    const metricsEntry = resolve('.chaos-build/lib/metrics.js');
    const script = `
      import { register } from 'node:module';
      register(${JSON.stringify(refuse)});
      const main = await import(${JSON.stringify(entry)});
      console.log(typeof main.RedisTaskTransport, typeof main.RedisTaskClient);
      await import(${JSON.stringify(metricsEntry)}).then(() => console.log('metrics loaded'), (e) => console.log('metrics: ' + e.code));
    `;
    const output = await new Promise<string>((done, fail) =>
      execFile(process.execPath, ['--input-type=module', '-e', script], (error, stdout, stderr) =>
        error ? fail(new Error(stderr)) : done(stdout),
      ),
    );
    expect(output).toBe('function function\nmetrics: ERR_MODULE_NOT_FOUND\n');
  });
});

describe('health indicator (nestjs-redis-tasks/terminus)', () => {
  it('is up with a listening worker, down when the worker is gone or dead letters grow too fast', async () => {
    const module = await app();
    const health = module.get(HealthCheckService);
    const indicator = module.get(RedisTaskHealthIndicator);
    const client = module.get(RedisTaskClient);
    const { transport } = await startWorker(prefix, [Handlers]);
    const check = () => health.check([() => indicator.isHealthy('tasks', { transport, maxDeadLetterGrowth: 1 })]);
    const first = await check();
    expect(first).toMatchObject({
      status: 'ok',
      info: { tasks: { status: 'up', redis: 'up', worker: 'connected', deadLetterGrowth: 0 } },
    });
    await client.emitBatch('obs.work', [{ fail: true }, { fail: true }]);
    await waitFor(async () => (await redis.llen(`${prefix}:{obs.work}:dead`)) === 2, 'two dead letters');
    await expect(check()).rejects.toMatchObject({
      response: { status: 'error', error: { tasks: { status: 'down', deadLetterGrowth: 2 } } },
    });
    // Growth is measured between checks: the next check sees none.
    expect(await check()).toMatchObject({ status: 'ok' });
    await transport.close();
    await expect(check()).rejects.toMatchObject({
      response: { error: { tasks: { status: 'down', worker: 'disconnected' } } },
    });
  });
});
