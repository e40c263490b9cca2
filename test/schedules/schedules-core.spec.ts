import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { TaskAdmin } from '../../lib/core/admin/admin.js';
import { decodeEntry } from '../../lib/core/model/codec.js';
import { InvalidScheduleError, ScheduleNotFoundError } from '../../lib/core/model/errors.js';
import { tickTaskId } from '../../lib/core/model/schedule.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { QueueLayouts } from '../../lib/core/redis/layouts.js';
import { TaskStore } from '../../lib/core/redis/store.js';
import { SCHEDULE_LIMITS, type ScheduleTickEvent } from '../../lib/core/schedules/tick-firer.js';
import { ScheduleTicker } from '../../lib/core/schedules/ticker.js';
import { silentLogger } from '../../lib/core/support/logger.js';
import { deleteKeys, openRedis, testPrefix, waitFor } from '../support/redis.js';

const redis = openRedis();
let prefix = '';
const tickers: ScheduleTicker[] = [];

/**
 * A fresh prefix whose `patterns` were used (their shard count on record, as a worker's or producer's first
 * use leaves it): a schedule fires only into a pattern whose shard count is decided.
 */
async function fresh(name: string, ...patterns: string[]): Promise<{ admin: TaskAdmin; keys: PrefixKeys }> {
  prefix = testPrefix(`sched-${name}`);
  const keys = new PrefixKeys(prefix);
  const layouts = new QueueLayouts(redis, keys, 1);
  for (const pattern of patterns) await layouts.layout(pattern);
  return { admin: TaskAdmin.forPrefix(redis, prefix), keys };
}

function ticker(events: ScheduleTickEvent[] = [], checkMs = 1_000): ScheduleTicker {
  const made = new ScheduleTicker(
    TaskStore.recorded(redis, prefix),
    { checkMs, limits: SCHEDULE_LIMITS, onTick: (event) => events.push(event) },
    silentLogger,
  );
  tickers.push(made);
  made.start();
  return made;
}

/** The ids of the tasks waiting in a pattern's queue (client `schedules`), oldest first. */
async function queued(keys: PrefixKeys, pattern: string, clientId = 'schedules'): Promise<string[]> {
  const entries = await redis.lrange(keys.queue(pattern).pending(clientId), 0, -1);
  return entries.map((entry) => {
    const decoded = decodeEntry(entry);
    if (!decoded.ok) throw new Error('undecodable entry');
    return decoded.entry.envelope.id;
  });
}

afterEach(async () => {
  await Promise.all(tickers.splice(0).map((made) => made.close()));
  await deleteKeys(redis, prefix);
});

afterAll(async () => {
  await redis.quit();
});

describe('recurring schedules (core, real Redis)', () => {
  it('refuses an invalid spec naming the field, and writes nothing', async () => {
    const { admin, keys } = await fresh('invalid');
    await expect(admin.upsertSchedule('r', { pattern: 'p' })).rejects.toThrow(/exactly one of "cron" and "everyMs"/);
    await expect(admin.upsertSchedule('r', { pattern: 'p', cron: 'every day' })).rejects.toThrow(InvalidScheduleError);
    await expect(admin.upsertSchedule('r', { pattern: 'p', cron: '0 3 * * *', tz: 'Mars/Olympus' })).rejects.toThrow(
      /"tz" must be an IANA time zone/,
    );
    await expect(admin.upsertSchedule('bad id', { pattern: 'p', everyMs: 1_000 })).rejects.toThrow(/schedule id/);
    await expect(admin.upsertSchedule('r', { pattern: 'p', everyMs: 1_000, missed: { max: 0 } })).rejects.toThrow(
      /"missed"/,
    );
    expect(await redis.exists(keys.schedules.records, keys.schedules.due)).toBe(0);
  });

  it('5 replicas storing the same schedule at once leave one; a changed spec is a new version', async () => {
    const { admin } = await fresh('upsert');
    const spec = { pattern: 'report', cron: '0 3 * * *', tz: 'Europe/Berlin', payload: { kind: 'nightly' } };
    const replicas = Array.from({ length: 5 }, () => TaskAdmin.forPrefix(openRedis(), prefix));
    try {
      const answers = await Promise.all(replicas.map((replica) => replica.upsertSchedule('nightly', spec)));
      expect(answers.filter((answer) => answer === 'created')).toHaveLength(1);
      expect(answers.filter((answer) => answer === 'unchanged')).toHaveLength(4);
    } finally {
      await Promise.all(replicas.map((replica) => (replica as unknown as { store: TaskStore }).store.redis.quit()));
    }
    const [listed] = await admin.listSchedules();
    expect(listed).toMatchObject({ id: 'nightly', version: 1, paused: false, source: 'api' });
    expect(listed.nextTicks).toHaveLength(3);
    // 03:00 in Berlin is 01:00 or 02:00 UTC.
    for (const tick of listed.nextTicks) expect([1, 2]).toContain(new Date(tick).getUTCHours());
    expect(await admin.upsertSchedule('nightly', { ...spec, cron: '0 4 * * *' })).toBe('updated');
    expect((await admin.listSchedules())[0].version).toBe(2);
  });

  it('fires each tick of a 200 ms rhythm exactly once while three processes fire it', async () => {
    const { admin, keys } = await fresh('once', 'pulse');
    const events: ScheduleTickEvent[] = [];
    await admin.upsertSchedule('pulse', { pattern: 'pulse', everyMs: 200, overlap: 'allow' });
    ticker(events);
    ticker(events);
    ticker(events);
    await waitFor(async () => (await queued(keys, 'pulse')).length >= 10, 'ten ticks');
    await Promise.all(tickers.splice(0).map((made) => made.close()));
    // close() does not wait for Redis: a check under way may have written its tick and not yet moved its
    // schedule on (which tells the tick's event). It finishes on its own connection.
    const told = () => events.filter((event) => event.outcome === 'fired').length;
    await waitFor(async () => {
      const written = (await queued(keys, 'pulse')).length;
      return (await admin.listSchedules())[0].state.fired === written && told() >= written;
    }, 'the last check to finish');
    const ids = await queued(keys, 'pulse');
    expect(new Set(ids).size).toBe(ids.length); // no tick twice
    const ticks = ids.map((id) => Date.parse(id.slice('pulse@'.length)));
    for (let i = 1; i < ticks.length; i++) expect(ticks[i] - ticks[i - 1]).toBe(200); // none skipped
    const fired = events.filter((event) => event.outcome === 'fired').map((event) => event.taskId);
    expect(fired.sort()).toEqual([...ids].sort()); // each told once, by one process
    const [listed] = await admin.listSchedules();
    expect(listed.state.fired).toBe(ids.length);
    expect(listed.state.lastTaskId).toBe(ids.at(-1));
  });

  it('takes a changed spec from its next tick: the new rhythm from then on, no tick twice', async () => {
    const { admin, keys } = await fresh('change', 'beat');
    await admin.upsertSchedule('beat', { pattern: 'beat', everyMs: 200, overlap: 'allow' });
    ticker();
    await waitFor(async () => (await queued(keys, 'beat')).length >= 3, 'three ticks at 200 ms');
    expect(await admin.upsertSchedule('beat', { pattern: 'beat', everyMs: 500, overlap: 'allow' })).toBe('updated');
    const changedAt = Date.now();
    const before = (await queued(keys, 'beat')).length;
    await waitFor(async () => (await queued(keys, 'beat')).length >= before + 3, 'three ticks after the change');
    const ticks = (await queued(keys, 'beat')).map((id) => Date.parse(id.slice('beat@'.length)));
    expect(new Set(ticks).size).toBe(ticks.length);
    const after = ticks.filter((tick) => tick > changedAt + 50);
    const gaps = after.slice(1).map((tick, i) => tick - after[i]);
    expect(gaps.every((gap) => gap === 500)).toBe(true);
    expect((await admin.listSchedules())[0].version).toBe(2);
  });

  it("with overlap 'skip', a tick whose previous task still waits produces nothing, and says so", async () => {
    const { admin, keys } = await fresh('overlap', 'sync');
    const events: ScheduleTickEvent[] = [];
    await admin.upsertSchedule('sync', { pattern: 'sync', everyMs: 200 });
    ticker(events);
    await waitFor(() => events.filter((event) => event.outcome === 'skipped').length >= 2, 'two skipped ticks');
    const ids = await queued(keys, 'sync');
    expect(ids).toHaveLength(1); // nobody ran the first: every later tick was skipped
    const skipped = events.filter((event) => event.outcome === 'skipped');
    expect(skipped.every((event) => event.heldBy === ids[0])).toBe(true);
    expect((await admin.listSchedules())[0].state.skipped).toBeGreaterThanOrEqual(2);
  });

  it("triggers nothing while the previous task still lives (overlap 'skip'), and says which task holds it", async () => {
    const { admin, keys } = await fresh('trigger-overlap', 'report');
    await admin.upsertSchedule('report', { pattern: 'report', cron: '0 3 * * *' });
    const first = await admin.triggerSchedule('report');
    expect(first.fired).toBe(true);
    const second = await admin.triggerSchedule('report');
    expect(second).toEqual({ fired: false, heldBy: (first as { taskId: string }).taskId });
    expect(await queued(keys, 'report')).toEqual([(first as { taskId: string }).taskId]);
  });

  it('stops after endAt, and lists the schedule as ended', async () => {
    const { admin, keys } = await fresh('ended', 'short');
    const startAt = Date.now() + 100;
    await admin.upsertSchedule('short', {
      pattern: 'short',
      everyMs: 100,
      startAt,
      endAt: startAt + 300,
      overlap: 'allow',
    });
    ticker();
    await waitFor(async () => (await admin.listSchedules())[0].ended, 'the schedule to end');
    const ticks = (await queued(keys, 'short')).map((id) => Date.parse(id.slice('short@'.length)) - startAt);
    expect(ticks).toEqual([0, 100, 200, 300]);
    expect((await admin.listSchedules())[0]).toMatchObject({ ended: true, paused: false, nextTicks: [] });
  });

  it('keeps a paused schedule paused when the same spec is stored again (a worker restarting with its decorator)', async () => {
    const { admin } = await fresh('paused-upsert');
    const spec = { pattern: 'p', everyMs: 60_000 };
    await admin.upsertSchedule('kept', spec);
    await admin.pauseSchedule('kept');
    expect(await admin.upsertSchedule('kept', spec)).toBe('unchanged');
    expect((await admin.listSchedules())[0]).toMatchObject({ paused: true, nextTicks: [] });
  });

  it('pauses, resumes from the next tick, triggers one run now, and removes', async () => {
    const { admin, keys } = await fresh('ops', 'job');
    await admin.upsertSchedule('hourly', { pattern: 'job', cron: '0 * * * *', overlap: 'allow' });
    await admin.pauseSchedule('hourly');
    expect((await admin.listSchedules())[0]).toMatchObject({ paused: true, nextTicks: [] });
    await admin.resumeSchedule('hourly');
    const [resumed] = await admin.listSchedules();
    expect(resumed.paused).toBe(false);
    expect(resumed.nextTicks[0] % 3_600_000).toBe(0);
    const triggered = await admin.triggerSchedule('hourly');
    expect(triggered).toMatchObject({ fired: true });
    expect(await queued(keys, 'job')).toEqual([(triggered as { taskId: string }).taskId]);
    expect(await admin.removeSchedule('hourly')).toBe(true);
    expect(await admin.removeSchedule('hourly')).toBe(false);
    expect(await admin.listSchedules()).toEqual([]);
    await expect(admin.pauseSchedule('hourly')).rejects.toThrow(ScheduleNotFoundError);
    await expect(admin.triggerSchedule('hourly')).rejects.toThrow(ScheduleNotFoundError);
  });

  it("after a stop, fires the missed ticks as 'missed' says: skip none, once the latest, { max } the latest max", async () => {
    const { admin, keys } = await fresh('missed', 'm-skip', 'm-once', 'm-max');
    const now = Date.now();
    // Each schedule's first tick was 55 s ago (every 10 s since): five ticks are past the grace of 10 s.
    const startAt = now - 55_000;
    await admin.upsertSchedule('skip', { pattern: 'm-skip', everyMs: 10_000, startAt, overlap: 'allow' });
    await admin.upsertSchedule('once', {
      pattern: 'm-once',
      everyMs: 10_000,
      startAt,
      overlap: 'allow',
      missed: 'once',
    });
    await admin.upsertSchedule('max', {
      pattern: 'm-max',
      everyMs: 10_000,
      startAt,
      overlap: 'allow',
      missed: { max: 2 },
    });
    // Stored "now", their next tick is in the future: move each back to its first tick, as after a stop.
    for (const id of ['skip', 'once', 'max']) await redis.zadd(keys.schedules.due, startAt, id);
    const events: ScheduleTickEvent[] = [];
    ticker(events);
    await waitFor(() => events.filter((event) => event.outcome === 'missed').length === 3, 'the missed ticks');
    const ticksOf = async (pattern: string, id: string) =>
      (await queued(keys, pattern)).map((taskId) => Date.parse(taskId.slice(id.length + 1)) - startAt);
    // Ticks at 0, 10, 20, 30, 40 s are missed (more than 10 s late); the one at 50 s is on time.
    const onTime = [50_000];
    expect(await ticksOf('m-skip', 'skip')).toEqual(onTime);
    expect(await ticksOf('m-once', 'once')).toEqual([40_000, ...onTime]);
    expect(await ticksOf('m-max', 'max')).toEqual([30_000, 40_000, ...onTime]);
    const missed = Object.fromEntries(
      events.filter((event) => event.outcome === 'missed').map((event) => [event.scheduleId, event.count]),
    );
    expect(missed).toEqual({ skip: 5, once: 4, max: 3 });
  });

  it('drops a due entry with no schedule behind it, and fires nothing for it', async () => {
    const { keys } = await fresh('stray');
    await redis.zadd(keys.schedules.due, 1, 'ghost');
    await redis.hset(keys.schedules.records, 'junk', 'not a schedule');
    await redis.zadd(keys.schedules.due, 1, 'junk');
    ticker();
    await waitFor(async () => (await redis.zcard(keys.schedules.due)) === 0, 'the stray entries to go');
    expect(await redis.hexists(keys.schedules.records, 'junk')).toBe(0);
  });

  it("never decides a sharded pattern's shard count: ticks wait (and say why) until its workers record 3 shards, then fire into them", async () => {
    const { admin, keys } = await fresh('held', 'other');
    const events: ScheduleTickEvent[] = [];
    // Stored before `b` ever ran (a deploy script writing schedules first); fired by processes of other patterns.
    await admin.upsertSchedule('b-every', { pattern: 'b', everyMs: 300, overlap: 'allow' });
    await expect(admin.triggerSchedule('b-every')).rejects.toMatchObject({
      name: 'ScheduleHeldError',
      code: 'SCHEDULE_HELD',
      pattern: 'b',
    });
    ticker(events);
    ticker(events);
    await waitFor(async () => ((await admin.listSchedules())[0].state.held ?? 0) >= 3, 'three held ticks');
    const [listed] = await admin.listSchedules();
    expect(listed.heldReason).toMatch(/pattern "b".*shard count is not on record/);
    expect(listed.state).toMatchObject({ fired: 0, lastOutcome: 'held' });
    // Nothing written for b: no count on record, no unsharded keys.
    expect(await redis.exists(keys.shardCount('b'), keys.queue('b').ring, keys.queue('b').pendingCount)).toBe(0);
    // b's workers start with 3 shards: not refused, and the ticks go where their clients live.
    const layout = await new QueueLayouts(redis, keys, 3).layout('b');
    const shard = layout.shardOf('schedules');
    await waitFor(async () => (await redis.llen(shard.pending('schedules'))) >= 2, "two ticks in b's shard");
    expect(await redis.exists(keys.queue('b').ring)).toBe(0);
    expect((await admin.listSchedules())[0].heldReason).toBeUndefined();
    const triggered = await admin.triggerSchedule('b-every');
    expect(triggered.fired).toBe(true);
    const fired = events.filter((event) => event.outcome === 'fired').length;
    expect(fired).toBeGreaterThanOrEqual(2);
  });

  it("holds a tick stored just before the pattern's first worker and fires it once the count is on record (within the grace)", async () => {
    const { admin, keys } = await fresh('held-deploy');
    const events: ScheduleTickEvent[] = [];
    await admin.upsertSchedule('daily', { pattern: 'late', cron: '0 3 * * *' });
    // Its tick came 200 ms ago; no worker of `late` has run yet.
    await redis.zadd(keys.schedules.due, Date.now() - 200, 'daily');
    ticker(events);
    await waitFor(async () => (await admin.listSchedules())[0].state.lastOutcome === 'held', 'the tick held');
    await new QueueLayouts(redis, keys, 1).layout('late');
    await waitFor(() => events.some((event) => event.outcome === 'fired'), 'the held tick fired');
    expect(await queued(keys, 'late')).toHaveLength(1);
    expect((await admin.listSchedules())[0].state).toMatchObject({ fired: 1, held: 0, missed: 0 });
  });

  it('shares 3,000 schedules due at one tick between three processes: each fired once, counted once, none missed', async () => {
    const { admin, keys } = await fresh('crowd', 'crowd');
    const count = 3_000;
    const events: ScheduleTickEvent[] = [];
    for (let i = 0; i < count; i += 500) {
      await Promise.all(
        Array.from({ length: Math.min(500, count - i) }, (_, j) =>
          admin.upsertSchedule(`c${i + j}`, { pattern: 'crowd', cron: '0 3 * * *', payload: { n: i + j } }),
        ),
      );
    }
    // All due at the same moment (as a cron of every 30 s makes them).
    const due = Date.now() - 200;
    const members: (string | number)[] = [];
    for (let i = 0; i < count; i++) members.push(due, `c${i}`);
    await redis.zadd(keys.schedules.due, ...members);
    ticker(events);
    ticker(events);
    ticker(events);
    await waitFor(() => events.length >= count, 'every tick told', { timeoutMs: 60_000 });
    expect(events.every((event) => event.outcome === 'fired')).toBe(true);
    expect(new Set(events.map((event) => event.scheduleId)).size).toBe(count);
    expect(await redis.llen(keys.queue('crowd').pending('schedules'))).toBe(count);
    const states = await admin.listSchedules();
    expect(states.filter((listed) => listed.state.fired === 1 && listed.state.missed === 0)).toHaveLength(count);
    expect(await redis.hlen(keys.schedules.firing)).toBe(0);
  });

  it('fires late, and counts as fired, ticks past the grace that processes busy since had already seen', async () => {
    const { admin, keys } = await fresh('seen', 'seen');
    const events: ScheduleTickEvent[] = [];
    await admin.upsertSchedule('s', { pattern: 'seen', cron: '0 3 * * *' });
    // Its tick was due 20 s ago and processes have been taking work since (a long list ahead of it).
    const now = Date.now();
    await redis.zadd(keys.schedules.due, now - 20_000, 's');
    await redis.set(keys.schedules.checked, `${now - 25_000}|${now - 50}`, 'PX', 60_000);
    ticker(events);
    await waitFor(() => events.length > 0, 'the tick told');
    expect(events).toEqual([expect.objectContaining({ outcome: 'fired', scheduleId: 's' })]);
    expect((await admin.listSchedules())[0].state).toMatchObject({ fired: 1, missed: 0 });
  });

  it('counts every tick that ran while an operator pauses and resumes between its task written and its schedule moved on', async () => {
    const { admin, keys } = await fresh('pause-race', 'pr');
    await admin.upsertSchedule('pr', { pattern: 'pr', everyMs: 100, overlap: 'allow' });
    // The firer's process is slow between writing a tick's task and moving its schedule on (a long GC pause,
    // a busy event loop): 40 ms, in which the operator pauses and resumes.
    const slow = openRedis();
    const advance = slow.advanceSchedule.bind(slow);
    slow.advanceSchedule = async (...args: Parameters<typeof advance>) => {
      await new Promise((resolve) => setTimeout(resolve, 40));
      return advance(...args);
    };
    const firing = new ScheduleTicker(
      TaskStore.recorded(slow, prefix),
      { checkMs: 50, limits: SCHEDULE_LIMITS },
      silentLogger,
    );
    tickers.push(firing);
    firing.start();
    const pending = keys.queue('pr').pending('schedules');
    try {
      for (let round = 0; round < 20; round++) {
        const written = await redis.llen(pending);
        await waitFor(async () => (await redis.llen(pending)) > written, 'the next tick written', { intervalMs: 2 });
        await admin.pauseSchedule('pr');
        await admin.resumeSchedule('pr');
      }
      await admin.pauseSchedule('pr');
      await waitFor(async () => (await redis.hlen(keys.schedules.firing)) === 0, 'no fire under way');
      const ran = await redis.llen(pending);
      expect(ran).toBeGreaterThanOrEqual(20);
      expect((await admin.listSchedules())[0].state.fired).toBe(ran);
    } finally {
      await firing.close();
      slow.disconnect();
    }
  });

  it('names each tick task by its schedule and time', () => {
    expect(tickTaskId('nightly', Date.UTC(2026, 10, 26, 2))).toBe('nightly@2026-11-26T02:00:00.000Z');
  });
});
