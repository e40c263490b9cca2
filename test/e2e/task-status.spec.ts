import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { Ctx, EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { firstValueFrom, lastValueFrom } from 'rxjs';
import {
  InvalidTaskError,
  RedisTaskAdmin,
  RedisTaskClient,
  RedisTaskContext,
  RedisTaskRecordBuilder,
  TaskCancelledError,
  type RedisTaskReceipt,
  type TaskOutcomeEvent,
  type TaskProgressEvent,
} from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { startProducer, startWorker } from '../support/nest.js';
import { claimAs, deleteKeys, gate, keysUnder, openRedis, redisUrl, testPrefix, waitFor } from '../support/redis.js';
import { gatewayOf } from '../../lib/core/redis/gateway.js';
import { DashboardService } from '../../lib/nest/dashboard/dashboard.service.js';
import { resolveSettings } from '../../lib/nest/dashboard/dashboard.options.js';
import { requeueProcessing } from '../../lib/core/redis/requeue.js';

const redis = openRedis();
const started: { close(): Promise<unknown> }[] = [];
let prefix = '';
/** What the handlers saw, per task id. */
const seen = new Map<string, { runs: number; aborted?: unknown }>();
let hold = gate();
/** Told when a job.race task starts, by id. */
const startedRace = new Map<string, () => void>();

@Controller()
class Jobs {
  @EventPattern<string>('job.quick')
  quick(@Ctx() ctx: RedisTaskContext): void {
    note(ctx.getTaskId());
  }

  @MessagePattern('job.echo')
  echo(@Payload() payload: { n: number }, @Ctx() ctx: RedisTaskContext): { doubled: number } {
    note(ctx.getTaskId());
    return { doubled: payload.n * 2 };
  }

  /** Runs until its signal aborts (or the test opens the gate), reporting progress first. */
  @MessagePattern('job.long')
  async long(@Ctx() ctx: RedisTaskContext): Promise<string> {
    const runs = note(ctx.getTaskId());
    await ctx.progress({ step: 'started' });
    await Promise.race([
      hold.promise,
      new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true })),
    ]);
    if (ctx.signal.aborted) runs.aborted = ctx.signal.reason;
    return 'finished';
  }

  @MessagePattern('job.steps')
  async steps(@Payload() payload: { count: number }, @Ctx() ctx: RedisTaskContext): Promise<string> {
    for (let i = 1; i <= payload.count; i++) await ctx.progress({ i });
    return 'all done';
  }

  /** Runs for `ms` (by its payload), telling the test it started. */
  @EventPattern<string>('job.race')
  async race(@Payload() payload: { ms: number }, @Ctx() ctx: RedisTaskContext): Promise<void> {
    note(ctx.getTaskId());
    startedRace.get(ctx.getTaskId())?.();
    await new Promise((resolve) => setTimeout(resolve, payload.ms));
  }

  @EventPattern<string>('job.failing')
  failing(): void {
    throw new Error('always fails');
  }
}

function note(id: string): { runs: number; aborted?: unknown } {
  const entry = seen.get(id) ?? { runs: 0 };
  entry.runs++;
  seen.set(id, entry);
  return entry;
}

afterEach(async () => {
  hold.open();
  await Promise.all(started.splice(0).map((app) => app.close()));
  await deleteKeys(redis, prefix);
  seen.clear();
  hold = gate();
});

afterAll(async () => {
  await redis.quit();
});

async function producer(options: { track?: boolean | { keepMs?: number; liveMs?: number } } = {}) {
  const { client, module } = await startProducer(prefix, options);
  started.push(module);
  return { client, admin: new RedisTaskAdmin(client) };
}

async function worker(options: Parameters<typeof startWorker>[2] = {}) {
  const app = await startWorker(prefix, [Jobs], { heartbeatIntervalMs: 100, reaperIntervalMs: 50, ...options });
  started.push(app.app);
  return app;
}

async function emitted(client: RedisTaskClient, pattern: string, data: unknown): Promise<string> {
  const receipt = await firstValueFrom(client.emit<RedisTaskReceipt>(pattern, data));
  return receipt.id;
}

describe('status by id (getTask)', () => {
  it('keeps no per-task key when tracking is off', async () => {
    prefix = testPrefix('track-off');
    const { client, admin } = await producer();
    await worker();
    const ids = await Promise.all(Array.from({ length: 50 }, (_, n) => emitted(client, 'job.quick', { n })));
    await waitFor(() => ids.every((id) => seen.has(id)), 'the 50 untracked tasks to run');
    expect((await keysUnder(redis, prefix)).filter((key) => key.includes(':task:'))).toEqual([]);
    expect(await admin.getTask('job.quick', ids[0])).toEqual({
      state: 'unknown',
      id: ids[0],
      pattern: 'job.quick',
      group: 'default',
    });
  });

  it('tells each state: pending, delayed, running (with progress and lease), completed (with result), dead, unknown', async () => {
    prefix = testPrefix('track-states');
    const { client, admin } = await producer({ track: { keepMs: 60_000 } });
    const pending = await emitted(client, 'job.quick', { n: 1 });
    const delayed = await emitted(client, 'job.quick', new RedisTaskRecordBuilder({ n: 2 }).setDelay(60_000).build());
    expect(await admin.getTask('job.quick', pending)).toMatchObject({
      state: 'pending',
      clientId: 'default',
      clientPending: 1,
    });
    const due = await admin.getTask('job.quick', delayed);
    expect(due).toMatchObject({ state: 'delayed', why: 'delay' });
    expect(due.dueAt).toBeGreaterThan(Date.now() + 50_000);

    const { transport } = await worker({ maxAttempts: 1 });
    const long = client.send('job.long', { n: 3 });
    const longResult = lastValueFrom(long);
    const runningId = await waitFor(() => [...seen.keys()].find((id) => id !== pending), 'the long task to start');
    const running = await waitFor(async () => {
      const status = await admin.getTask('job.long', runningId);
      return status.progress !== undefined ? status : undefined;
    }, 'its progress to be stored');
    expect(running).toMatchObject({
      state: 'running',
      workerId: transport.options.workerId,
      attempt: 1,
      progress: { step: 'started' },
    });
    expect(running.leaseExpiresAt).toBeGreaterThan(Date.now());
    expect(running.startedAt).toBeLessThanOrEqual(Date.now());
    hold.open();
    await expect(longResult).resolves.toBe('finished');
    await waitFor(
      async () => (await admin.getTask('job.long', runningId)).state === 'completed',
      'the long task to be completed',
    );
    expect(await admin.getTask('job.long', runningId)).toMatchObject({ state: 'completed', result: 'finished' });
    expect(await admin.getTask('job.quick', pending)).toMatchObject({ state: 'completed' });

    const failing = await emitted(client, 'job.failing', {});
    const dead = await waitFor(async () => {
      const status = await admin.getTask('job.failing', failing);
      return status.state === 'dead' ? status : undefined;
    }, 'the failing task to be dead');
    expect(dead).toMatchObject({ reason: 'failed', error: { message: 'always fails' } });
    expect(await admin.getTask('job.quick', 'no-such-task')).toMatchObject({ state: 'unknown' });
    // Every index has a TTL: nothing is kept for ever.
    for (const key of (await keysUnder(redis, prefix)).filter((key) => key.includes(':task:'))) {
      expect(await redis.pttl(key)).toBeGreaterThan(0);
    }
  });

  it('tracks a dead letter requeued: its index says it waits again (its death forgotten) and it can be cancelled by id', async () => {
    prefix = testPrefix('track-revived');
    const { client, admin } = await producer({ track: { keepMs: 60_000 } });
    const app = await worker({ maxAttempts: 1 });
    const failing = await emitted(client, 'job.failing', {});
    await waitFor(async () => (await admin.getTask('job.failing', failing)).state === 'dead', 'the task to be dead');
    await app.app.close();
    expect(await admin.requeueDeadLetters('job.failing', 'all')).toMatchObject({ requeued: 1 });
    const revived = await admin.getTask('job.failing', failing);
    expect(revived).toMatchObject({ state: 'pending' });
    expect(revived).not.toHaveProperty('reason');
    expect(revived).not.toHaveProperty('error');
    // Its index lives for liveMs again (7 days by default), not for the keepMs its death gave it.
    expect(await redis.pttl(new PrefixKeys(prefix).queue('job.failing').task(failing))).toBeGreaterThan(60_000);
    expect(await admin.cancel('job.failing', failing)).toEqual({ cancelled: true, was: 'pending' });
  });

  it('tells a delayed task promoted to its list (its due time came, no worker free) as pending', async () => {
    prefix = testPrefix('track-promoted');
    const { client, admin } = await producer({ track: true });
    await worker();
    await admin.pause('job.quick');
    const id = await emitted(client, 'job.quick', new RedisTaskRecordBuilder({ n: 1 }).setDelay(100).build());
    const keys = new PrefixKeys(prefix).queue('job.quick');
    await waitFor(async () => (await redis.llen(keys.pending('default'))) === 1, 'the task to be promoted');
    expect(await admin.getTask('job.quick', id)).toMatchObject({ state: 'pending', clientPending: 1 });
    expect(await admin.getTask('job.quick', id)).not.toHaveProperty('dueAt');
    await admin.resume('job.quick');
    await waitFor(() => seen.has(id), 'the task to run once resumed');
  });

  it('tells a task waiting for its retry apart from one delayed at enqueue', async () => {
    prefix = testPrefix('track-retry');
    const { client, admin } = await producer({ track: true });
    await worker({ maxAttempts: 3, backoff: { type: 'fixed', delayMs: 60_000 } });
    const id = await emitted(client, 'job.failing', {});
    const status = await waitFor(async () => {
      const found = await admin.getTask('job.failing', id);
      return found.state === 'delayed' ? found : undefined;
    }, 'the failed task to wait for its retry');
    expect(status.why).toBe('retry');
    expect(await admin.cancel('job.failing', id, 'gave up')).toEqual({ cancelled: true, was: 'delayed' });
    expect(await admin.getTask('job.failing', id)).toMatchObject({
      state: 'cancelled',
      was: 'delayed',
      reason: 'gave up',
    });
    expect(await redis.zcard(new PrefixKeys(prefix).queue('job.failing').delayed)).toBe(0);
  });
});

describe('cancel by id', () => {
  it('removes a waiting task (plain, prioritized, delayed), frees its deduplication key and answers its send() caller', async () => {
    prefix = testPrefix('cancel-waiting');
    const { client, admin } = await producer({ track: true });
    const keys = new PrefixKeys(prefix).queue('job.echo');
    const plain = await emitted(client, 'job.quick', { n: 1 });
    const prioritized = await emitted(
      client,
      'job.quick',
      new RedisTaskRecordBuilder({ n: 2 }).setPriority(5).setDeduplicationKey('only-one').build(),
    );
    const later = await emitted(client, 'job.quick', new RedisTaskRecordBuilder({ n: 3 }).setDelay(60_000).build());
    const sent = lastValueFrom(client.send('job.echo', { n: 4 }));
    const sentId = await waitFor(async () => {
      const [entry] = await redis.lrange(keys.pending('default'), 0, 0);
      return entry && (JSON.parse(entry.slice(entry.indexOf('|') + 1)) as { id: string }).id;
    }, 'the send() task to be pending');

    expect(await admin.cancel('job.quick', plain)).toEqual({ cancelled: true, was: 'pending' });
    expect(await admin.cancel('job.quick', prioritized, 'not needed')).toEqual({ cancelled: true, was: 'pending' });
    expect(await admin.cancel('job.quick', later)).toEqual({ cancelled: true, was: 'delayed' });
    expect(await client.cancel('job.echo', sentId, 'user left')).toEqual({ cancelled: true, was: 'pending' });
    const error = await sent.catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(TaskCancelledError);
    expect(error).toMatchObject({ code: 'TASK_CANCELLED', taskId: sentId, reason: 'user left', pattern: 'job.echo' });
    // A second cancel changes nothing and says how the task ended.
    expect(await admin.cancel('job.quick', plain)).toEqual({ cancelled: false, state: 'cancelled' });
    expect(await admin.cancel('job.quick', 'never-enqueued')).toEqual({ cancelled: false, state: 'unknown' });
    // The deduplication key is free again.
    const again = await firstValueFrom(
      client.emit<RedisTaskReceipt>(
        'job.quick',
        new RedisTaskRecordBuilder({ n: 5 }).setDeduplicationKey('only-one').build(),
      ),
    );
    expect(again.duplicate).toBe(false);
    const quick = new PrefixKeys(prefix).queue('job.quick');
    expect(Number(await redis.get(quick.pendingCount))).toBe(1);
    expect(await redis.get(quick.prioritized)).toBe('0');
    expect(await redis.hget(quick.counters, 'cancelled')).toBe('3');

    await worker();
    await waitFor(() => seen.size === 1, 'the one task left to run');
    expect([...seen.keys()]).toEqual([again.id]);
  });

  it('stops a running task: its signal aborts with TaskCancelledError at once (pushed to its worker), its result is refused, its caller is told', async () => {
    prefix = testPrefix('cancel-running');
    const { client, admin } = await producer({ track: true });
    const outcomes: TaskOutcomeEvent[] = [];
    // No heartbeat within the test: only the control message can tell the worker.
    const { transport } = await worker({ heartbeatIntervalMs: 60_000, leaseMs: 120_000 });
    transport.on('task', (event) => outcomes.push(event));
    const result = lastValueFrom(client.send('job.long', {}));
    const id = await waitFor(() => [...seen.keys()][0], 'the task to start');
    await waitFor(async () => (await admin.getTask('job.long', id)).state === 'running', 'it to be running');
    expect(await admin.cancel('job.long', id, 'stop it')).toEqual({ cancelled: true, was: 'running' });
    await waitFor(() => seen.get(id)?.aborted, 'the handler to see its signal abort', { timeoutMs: 5_000 });
    expect(seen.get(id)?.aborted).toBeInstanceOf(TaskCancelledError);
    await expect(result).rejects.toMatchObject({ code: 'TASK_CANCELLED', reason: 'stop it' });
    await waitFor(() => outcomes.find((event) => event.id === id), 'the outcome event');
    expect(outcomes.filter((event) => event.id === id).map((event) => event.outcome)).toEqual(['cancelled']);
    const keys = new PrefixKeys(prefix).queue('job.long');
    expect(await redis.hgetall(keys.counters)).toMatchObject({ cancelled: '1' });
    expect(await redis.hget(keys.counters, 'completed')).toBeNull();
    expect(await admin.getTask('job.long', id)).toMatchObject({
      state: 'cancelled',
      was: 'running',
      reason: 'stop it',
    });
    expect(seen.get(id)?.runs).toBe(1);
  });

  it('cancels a task claimed but not yet started (the claim recorded it running) before any handler runs it, even after its worker died', async () => {
    prefix = testPrefix('cancel-between');
    const { client, admin } = await producer({ track: true });
    const keys = new PrefixKeys(prefix).queue('job.quick');
    const id = await emitted(client, 'job.quick', { n: 1 });
    // A worker claims it (the claim records it running) and dies before it starts it.
    await gatewayOf(redis).heartbeat(keys, 'ghost', 60_000);
    expect(await claimAs(redis, keys, 'ghost', 1)).toHaveLength(2);
    expect(await admin.getTask('job.quick', id)).toMatchObject({ state: 'running', workerId: 'ghost', attempt: 1 });
    // Its token leaves the dead worker at once: no recovery can return it to its queue.
    expect(await admin.cancel('job.quick', id, 'between')).toEqual({ cancelled: true, was: 'running' });
    expect(await redis.hlen(keys.processing('ghost'))).toBe(0);
    await requeueProcessing(
      redis,
      keys,
      { workerId: 'ghost', deadLetterCap: 10, resultTtlMs: 1_000 },
      { countAttempt: true },
    );
    expect(await admin.getTask('job.quick', id)).toMatchObject({ state: 'cancelled', reason: 'between' });
    const after = await emitted(client, 'job.quick', { n: 2 });
    await worker();
    await waitFor(() => seen.has(after), 'the next task to run');
    await waitFor(async () => (await admin.getTask('job.quick', id)).state === 'cancelled', 'the start to cancel it');
    expect(seen.has(id)).toBe(false);
    expect(await admin.getTask('job.quick', id)).toMatchObject({ state: 'cancelled', reason: 'between' });
    expect(await redis.hget(keys.counters, 'cancelled')).toBe('1');
  });

  it('records a tracked send() task removed at its reply timeout (cancelOnReplyTimeout) as cancelled', async () => {
    prefix = testPrefix('cancel-timeout');
    const { client, module } = await startProducer(prefix, {
      track: true,
      replyTimeoutMs: 200,
      cancelOnReplyTimeout: true,
    });
    started.push(module);
    await expect(lastValueFrom(client.send('job.echo', { n: 1 }))).rejects.toMatchObject({ cancelled: true });
    const keys = new PrefixKeys(prefix).queue('job.echo');
    expect(await redis.hget(keys.counters, 'cancelled')).toBe('1');
    const indexes = (await keysUnder(redis, prefix)).filter((key) => key.includes(':task:'));
    expect(indexes).toHaveLength(1);
    expect(await redis.hget(indexes[0], 'state')).toBe('cancelled');
    expect((await keysUnder(redis, prefix)).filter((key) => key.includes(':task-entry:'))).toEqual([]);
  });

  it('finds and cancels tracked tasks of a sharded queue, whichever shard their client lives in', async () => {
    prefix = testPrefix('cancel-shards');
    const { client, module } = await startProducer(prefix, { track: true, shards: 3 });
    started.push(module);
    const admin = new RedisTaskAdmin(client);
    const ids: string[] = [];
    for (const clientId of ['a', 'b', 'c', 'd', 'e', 'f']) {
      const record = new RedisTaskRecordBuilder({ clientId }).setClientId(clientId).setDelay(60_000).build();
      ids.push(await emitted(client, 'job.quick', record));
    }
    const layout = new PrefixKeys(prefix).layout('job.quick', 3);
    const shardsUsed = new Set(['a', 'b', 'c', 'd', 'e', 'f'].map((clientId) => layout.shardOf(clientId).shard));
    expect(shardsUsed.size).toBeGreaterThan(1);
    for (const id of ids) expect(await admin.getTask('job.quick', id)).toMatchObject({ state: 'delayed' });
    for (const id of ids) expect(await client.cancel('job.quick', id)).toEqual({ cancelled: true, was: 'delayed' });
    for (const id of ids) expect(await admin.getTask('job.quick', id)).toMatchObject({ state: 'cancelled' });
  });

  it("removes every consumer group's copy", async () => {
    prefix = testPrefix('cancel-groups');
    const { client, admin } = await producer({ track: true });
    await worker({ group: 'mail' });
    await worker({ group: 'audit' });
    const id = await emitted(client, 'job.quick', new RedisTaskRecordBuilder({}).setDelay(60_000).build());
    for (const group of ['mail', 'audit']) {
      expect(await admin.forGroup(group).getTask('job.quick', id)).toMatchObject({ state: 'delayed', group });
    }
    expect(await admin.forGroup('audit').cancel('job.quick', id)).toEqual({ cancelled: true, was: 'delayed' });
    for (const group of ['mail', 'audit']) {
      expect(await admin.forGroup(group).getTask('job.quick', id)).toMatchObject({ state: 'cancelled', group });
    }
  });

  it('cancel racing completion, 1,000 times: each task ends once, completed or cancelled, and every answer agrees', async () => {
    prefix = testPrefix('cancel-race');
    const { client, admin } = await producer({ track: { keepMs: 120_000 } });
    await worker({ concurrency: 20 });
    const tries = Array.from({ length: 1_000 }, async (_, n) => {
      // A third are cancelled at once (racing the claim and the start); a third 0 to 4 ms after their
      // handler started, racing a handler that returns at once and its acknowledgement; a third while their
      // handler still runs (200 ms), so both ends of the race happen on a loaded machine too.
      const ms = n % 3 === 1 ? 200 : 0;
      const receipt = await firstValueFrom(client.emit<RedisTaskReceipt>('job.race', { ms }));
      if (n % 3 !== 0) {
        if (!seen.has(receipt.id)) await new Promise<void>((resolve) => startedRace.set(receipt.id, resolve));
        await new Promise((resolve) => setTimeout(resolve, n % 5));
      }
      return { id: receipt.id, answer: await admin.cancel('job.race', receipt.id) };
    });
    const results = await Promise.all(tries);
    const keys = new PrefixKeys(prefix).queue('job.race');
    const settled = await waitFor(async () => {
      const counters = await redis.hgetall(keys.counters);
      const total = Number(counters.completed ?? 0) + Number(counters.cancelled ?? 0);
      return total === 1_000 ? counters : undefined;
    }, 'every task to end');
    let cancelled = 0;
    for (const { id, answer } of results) {
      const status = await admin.getTask('job.race', id);
      expect(['completed', 'cancelled']).toContain(status.state);
      if (answer.cancelled) {
        cancelled++;
        expect(status.state).toBe('cancelled');
        if (answer.was !== 'running') expect(seen.has(id)).toBe(false);
      } else {
        expect(answer).toEqual({ cancelled: false, state: 'completed' });
        expect(status.state).toBe('completed');
        expect(seen.get(id)?.runs).toBe(1);
      }
    }
    expect(Number(settled.cancelled ?? 0)).toBe(cancelled);
    expect(Number(settled.completed ?? 0)).toBe(1_000 - cancelled);
    // Both ends of the race happened: running tasks cancelled, and tasks that completed first.
    const runningCancelled = results.filter(({ answer }) => answer.cancelled && answer.was === 'running').length;
    expect({ runningCancelled: runningCancelled > 0, completed: cancelled < 1_000 }).toEqual({
      runningCancelled: true,
      completed: true,
    });
    expect(await redis.llen(keys.pending('default'))).toBe(0);
    expect(Number(await redis.get(keys.pendingCount))).toBe(0);
  });
});

describe('progress', () => {
  it('delivers 100 progress values to the send() caller in order, then the result', async () => {
    prefix = testPrefix('progress');
    const { client, admin } = await producer({ track: true });
    const { transport } = await worker();
    const events: TaskProgressEvent[] = [];
    transport.on('progress', (event) => events.push(event));
    const heard: unknown[] = [];
    const record = new RedisTaskRecordBuilder({ count: 100 }).onProgress((value) => heard.push(value)).build();
    const result = await lastValueFrom(client.send('job.steps', record));
    expect(result).toBe('all done');
    expect(heard).toEqual(Array.from({ length: 100 }, (_, n) => ({ i: n + 1 })));
    expect(events.map((event) => event.seq)).toEqual(Array.from({ length: 100 }, (_, n) => n + 1));
    const id = events[0].id;
    expect(await admin.getTask('job.steps', id)).toMatchObject({ state: 'completed', progress: { i: 100 } });
  });

  it('refuses progress that is not JSON or too large, and onProgress with emit()', async () => {
    prefix = testPrefix('progress-bad');
    const { client } = await producer();
    expect(() => new RedisTaskRecordBuilder({}).onProgress('no' as never)).toThrow(InvalidTaskError);
    await expect(
      firstValueFrom(client.emit('job.steps', new RedisTaskRecordBuilder({}).onProgress(() => undefined).build())),
    ).rejects.toThrow(/onProgress needs send/);
    expect(() => new RedisTaskRecordBuilder({}).setTracked({ keepMs: 0 })).toThrow(/keepMs must be an integer/);
  });
});

describe("the dashboard's task lookup", () => {
  it("shows a running task's progress only where payloads are shown (progress values are payload)", async () => {
    prefix = testPrefix('track-dash');
    const { client } = await producer({ track: true });
    await worker();
    const id = await emitted(client, 'job.long', {});
    const hidden = new DashboardService(resolveSettings({ connection: redisUrl(), prefix }, {}));
    const shown = new DashboardService(
      resolveSettings({ connection: redisUrl(), prefix, showPayloads: true }, { allowPayloadsWithoutGuard: true }),
    );
    try {
      await waitFor(async () => (await hidden.task({ name: 'job.long', id })).state === 'running', 'the task running');
      await waitFor(async () => (await shown.task({ name: 'job.long', id })).progress !== undefined, 'its progress');
      const withoutPayloads = await hidden.task({ name: 'job.long', id });
      expect(withoutPayloads).toMatchObject({ state: 'running', progressHidden: true });
      expect(withoutPayloads).not.toHaveProperty('progress');
      expect(JSON.stringify(withoutPayloads)).not.toContain('"step"');
      expect(await shown.task({ name: 'job.long', id })).toMatchObject({ progress: { step: 'started' } });
    } finally {
      hold.open();
      await hidden.onModuleDestroy();
      await shown.onModuleDestroy();
    }
  });
});

describe("a send() caller's own task id", () => {
  it('knows its task by the id it gave (setId): looks it up and cancels it while it waits for the result; the id twice at once is refused', async () => {
    prefix = testPrefix('track-own-id');
    const { client, admin } = await producer({ track: true });
    await worker();
    const record = new RedisTaskRecordBuilder({}).setId('report-2026-11-27').build();
    const result = firstValueFrom(client.send('job.long', record)).catch((caught: unknown) => caught);
    await waitFor(
      async () => (await admin.getTask('job.long', 'report-2026-11-27')).state === 'running',
      'the task running under its given id',
    );
    const twice = await firstValueFrom(client.send('job.long', record)).catch((caught: unknown) => caught);
    expect(twice).toMatchObject({ name: 'InvalidTaskError', message: expect.stringMatching(/still waits/) });
    expect(await admin.cancel('job.long', 'report-2026-11-27')).toMatchObject({ cancelled: true });
    expect(await result).toMatchObject({ name: 'TaskCancelledError' });
    expect(() => new RedisTaskRecordBuilder({}).setId('has space')).toThrow(/setId\(\)/);
  });
});
