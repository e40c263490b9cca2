import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { TaskAdmin } from '../../lib/core/admin/admin.js';
import { decodeEntry } from '../../lib/core/model/codec.js';
import { InvalidScheduleError, ScheduleNotFoundError } from '../../lib/core/model/errors.js';
import { tickTaskId } from '../../lib/core/model/schedule.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { TaskStore } from '../../lib/core/redis/store.js';
import { SCHEDULE_LIMITS, type ScheduleTickEvent } from '../../lib/core/schedules/tick-firer.js';
import { ScheduleTicker } from '../../lib/core/schedules/ticker.js';
import { silentLogger } from '../../lib/core/support/logger.js';
import { deleteKeys, openRedis, testPrefix, waitFor } from '../support/redis.js';

const redis = openRedis();
let prefix = '';
const tickers: ScheduleTicker[] = [];

function fresh(name: string): { admin: TaskAdmin; keys: PrefixKeys } {
  prefix = testPrefix(`sched-${name}`);
  return { admin: TaskAdmin.forPrefix(redis, prefix), keys: new PrefixKeys(prefix) };
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
    const { admin, keys } = fresh('invalid');
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
    const { admin } = fresh('upsert');
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
    const { admin, keys } = fresh('once');
    const events: ScheduleTickEvent[] = [];
    await admin.upsertSchedule('pulse', { pattern: 'pulse', everyMs: 200, overlap: 'allow' });
    ticker(events);
    ticker(events);
    ticker(events);
    await waitFor(async () => (await queued(keys, 'pulse')).length >= 10, 'ten ticks');
    await Promise.all(tickers.splice(0).map((made) => made.close()));
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
    const { admin, keys } = fresh('change');
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
    const { admin, keys } = fresh('overlap');
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
    const { admin, keys } = fresh('trigger-overlap');
    await admin.upsertSchedule('report', { pattern: 'report', cron: '0 3 * * *' });
    const first = await admin.triggerSchedule('report');
    expect(first.fired).toBe(true);
    const second = await admin.triggerSchedule('report');
    expect(second).toEqual({ fired: false, heldBy: (first as { taskId: string }).taskId });
    expect(await queued(keys, 'report')).toEqual([(first as { taskId: string }).taskId]);
  });

  it('stops after endAt, and lists the schedule as ended', async () => {
    const { admin, keys } = fresh('ended');
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
    const { admin } = fresh('paused-upsert');
    const spec = { pattern: 'p', everyMs: 60_000 };
    await admin.upsertSchedule('kept', spec);
    await admin.pauseSchedule('kept');
    expect(await admin.upsertSchedule('kept', spec)).toBe('unchanged');
    expect((await admin.listSchedules())[0]).toMatchObject({ paused: true, nextTicks: [] });
  });

  it('pauses, resumes from the next tick, triggers one run now, and removes', async () => {
    const { admin, keys } = fresh('ops');
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
    const { admin, keys } = fresh('missed');
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
    const { keys } = fresh('stray');
    await redis.zadd(keys.schedules.due, 1, 'ghost');
    await redis.hset(keys.schedules.records, 'junk', 'not a schedule');
    await redis.zadd(keys.schedules.due, 1, 'junk');
    ticker();
    await waitFor(async () => (await redis.zcard(keys.schedules.due)) === 0, 'the stray entries to go');
    expect(await redis.hexists(keys.schedules.records, 'junk')).toBe(0);
  });

  it('names each tick task by its schedule and time', () => {
    expect(tickTaskId('nightly', Date.UTC(2026, 10, 26, 2))).toBe('nightly@2026-11-26T02:00:00.000Z');
  });
});
