import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from '@jest/globals';
import { Redis } from 'ioredis';
import { TaskAdmin } from '../../lib/core/admin/admin.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { startRedisServer } from '../../scripts/redis-server.mjs';
import { testPrefix, waitFor } from '../support/redis.js';
import { REAPER, startWorkerProcess, type WorkerProcess } from './processes.js';

const processes: WorkerProcess[] = [];

afterEach(async () => {
  await Promise.all(processes.splice(0).map((process) => process.kill('SIGKILL')));
});

/** The tick time of each task id (`<schedule>@<ISO time>`) of one schedule. */
function ticksOf(ids: readonly string[], schedule: string): number[] {
  return ids
    .filter((id) => id.startsWith(`${schedule}@`))
    .map((id) => Date.parse(id.slice(schedule.length + 1)))
    .sort((a, b) => a - b);
}

describe('chaos: recurring schedules under kill -9 and a Redis restart', () => {
  it('makes exactly one task of every tick of a 200 ms rhythm and a per-second cron, with 3 workers and 2 reapers killed and restarted and Redis restarted from AOF', async () => {
    const prefix = testPrefix('chaos-schedules');
    const dir = mkdtempSync(join(tmpdir(), 'tasks-sched-aof-'));
    const args = ['--appendonly', 'yes', '--appendfsync', 'always', '--dir', dir];
    let server = await startRedisServer(args);
    const direct = new Redis(server.url, { maxRetriesPerRequest: null });
    const admin = TaskAdmin.onConnection(direct, prefix);
    const env = { REDIS_URL: server.url, PREFIX: prefix, LEASE_MS: 1_000, HEARTBEAT_MS: 200 };
    const start = (name: string) =>
      startWorkerProcess(name, env, name.startsWith('reaper') ? REAPER : undefined).then((started) => {
        processes.push(started);
        return started;
      });
    try {
      await admin.upsertSchedule('pulse', { pattern: 'chaos.tick', everyMs: 200, overlap: 'allow' });
      await admin.upsertSchedule('second', { pattern: 'chaos.tick', cron: '* * * * * *', overlap: 'allow' });
      const names = ['worker-1', 'worker-2', 'worker-3', 'reaper-1', 'reaper-2'];
      for (const name of names) await start(name);
      const windowStart = Date.now();
      let kills = 0;
      let restarted = false;
      while (Date.now() - windowStart < 20_000) {
        await new Promise((resolve) => setTimeout(resolve, 700));
        if (!restarted && Date.now() - windowStart > 9_000) {
          // Redis crashes (SIGKILL) and comes back from its AOF; every process reconnects by itself.
          await server.kill();
          server = await startRedisServer(args, server.port);
          restarted = true;
          continue;
        }
        // kill -9 one process at random (never the last one running: ticks are only owed while something runs).
        const victim = processes.splice(Math.floor(Math.random() * processes.length), 1)[0];
        await victim.kill('SIGKILL');
        kills++;
        await start(victim.id);
      }
      const stoppedAt = Date.now();
      // A process killed while firing leaves its take to the others once the take's lease ends (5 s), so the
      // last ticks before the stop may still be firing, late but within the 10 s grace: both schedules are
      // paused once they have caught up to the stop (a pause would leave those ticks unfired).
      await waitFor(
        async () =>
          (await admin.listSchedules()).every(
            (schedule) => (schedule.state.lastTick ?? 0) >= stoppedAt - (schedule.id === 'pulse' ? 200 : 1_000),
          ),
        'both schedules to have fired up to the stop',
        { timeoutMs: 10_000, intervalMs: 100 },
      );
      await admin.pauseSchedule('pulse');
      await admin.pauseSchedule('second');
      const queue = new PrefixKeys(prefix).queue('chaos.tick');
      await waitFor(
        async () =>
          (await direct.llen(queue.pending('schedules'))) === 0 &&
          (await direct.hlen(queue.processing('worker-1'))) +
            (await direct.hlen(queue.processing('worker-2'))) +
            (await direct.hlen(queue.processing('worker-3'))) ===
            0,
        'every tick task to run',
        { timeoutMs: 60_000, intervalMs: 100 },
      );
      const firsts = await direct.hgetall(`${prefix}:runs:first`);
      const ids = Object.keys(await direct.hgetall(`${prefix}:runs`));
      // No tick made two tasks: no task id ran a first attempt twice.
      expect(Object.entries(firsts).filter(([, count]) => Number(count) !== 1)).toEqual([]);
      for (const [schedule, gap] of [
        ['pulse', 200],
        ['second', 1_000],
      ] as const) {
        const ticks = ticksOf(ids, schedule);
        // Every tick from the first to the last made a task: no gap, none twice, across kills and the restart.
        const gaps = ticks.slice(1).map((tick, i) => tick - ticks[i]);
        expect(gaps.filter((each) => each !== gap)).toEqual([]);
        expect(ticks[0]).toBeLessThan(windowStart + 2 * gap + 1_000);
        expect(ticks.at(-1)).toBeGreaterThan(stoppedAt - 2 * gap - 1_000);
        console.log(
          `schedules chaos: "${schedule}" ${ticks.length} ticks, each one task; ${kills} kill -9s, Redis restarted from AOF once`,
        );
      }
      const listed = await admin.listSchedules();
      expect(listed.map((schedule) => schedule.state.missed)).toEqual([0, 0]);
    } finally {
      await Promise.all(processes.splice(0).map((process) => process.kill('SIGKILL')));
      direct.disconnect();
      await server.kill();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
