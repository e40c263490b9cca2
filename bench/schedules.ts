import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { TaskAdmin } from '../lib/core/admin/admin.js';
import { PrefixKeys } from '../lib/core/redis/keys.js';
import { defineScripts } from '../lib/core/redis/scripts.js';
import { SCHEDULE_LIMITS } from '../lib/core/schedules/tick-firer.js';
import { ScheduleTicker } from '../lib/core/schedules/ticker.js';
import { silentLogger } from '../lib/core/support/logger.js';
import { deleteMatching, serverSnapshot, sleep } from './measure.js';

export interface ScheduleFigures {
  /** Schedules stored, none due, for the idle row. */
  readonly idleSchedules: number;
  /** Redis commands per second per process while nothing is due (Lua included). */
  readonly idleCommandsPerSecond: number;
  /** Redis CPU per second (µs) meanwhile: the server's own idle work (its cron) included. */
  readonly idleRedisMicrosPerSecond: number;
  /** Firing processes of the ticking row. */
  readonly processes: number;
  /** Ticks fired (one task each) in the ticking row. */
  readonly ticks: number;
  /** Redis commands per tick, every process's checks included (Lua included). */
  readonly commandsPerTick: number;
  /** Redis CPU per tick (µs). */
  readonly redisMicrosPerTick: number;
}

/**
 * What recurring schedules cost Redis: an idle process (1,000 schedules stored, none due) over 10 s, and
 * three processes firing a 100 ms rhythm for 10 s (each tick one task).
 */
export async function scheduleCost(url: string): Promise<ScheduleFigures> {
  const prefix = `rtsched${randomBytes(3).toString('hex')}`;
  const server = new Redis(url);
  const connections: Redis[] = [];
  const open = () => {
    const connection = new Redis(url);
    connections.push(connection);
    return defineScripts(connection);
  };
  const admin = TaskAdmin.forPrefix(open(), prefix);
  const ticker = (checkMs = 1_000) => {
    const made = ScheduleTicker.forPrefix(open(), prefix, { checkMs, limits: SCHEDULE_LIMITS }, silentLogger);
    made.start();
    return made;
  };
  try {
    const idleSchedules = 1_000;
    for (let i = 0; i < idleSchedules; i++) {
      await admin.upsertSchedule(`yearly-${i}`, { pattern: 'bench.sched', cron: `0 0 1 1 *`, payload: { i } });
    }
    const idle = ticker();
    await sleep(500);
    const idleBefore = await serverSnapshot(server);
    await sleep(10_000);
    const idleAfter = await serverSnapshot(server);
    await idle.close();
    await deleteMatching(server, `${prefix}:*`);

    await admin.upsertSchedule('pulse', { pattern: 'bench.sched', everyMs: 100, overlap: 'allow' });
    const queue = new PrefixKeys(prefix).queue('bench.sched').pending('schedules');
    const processes = 3;
    const tickers = Array.from({ length: processes }, () => ticker());
    await sleep(1_000);
    const before = await serverSnapshot(server);
    const ticksBefore = await server.llen(queue);
    await sleep(10_000);
    const ticks = (await server.llen(queue)) - ticksBefore;
    const after = await serverSnapshot(server);
    await Promise.all(tickers.map((each) => each.close()));
    return {
      idleSchedules,
      idleCommandsPerSecond: (idleAfter.commands - idleBefore.commands) / 10,
      idleRedisMicrosPerSecond: (idleAfter.cpuMicros - idleBefore.cpuMicros) / 10,
      processes,
      ticks,
      // The two LLENs of this measure are not the schedules' own.
      commandsPerTick: (after.commands - before.commands - 2) / ticks,
      redisMicrosPerTick: (after.cpuMicros - before.cpuMicros) / ticks,
    };
  } finally {
    await deleteMatching(server, `${prefix}:*`);
    server.disconnect();
    for (const connection of connections) connection.disconnect();
  }
}

export function scheduleLine(figures: ScheduleFigures): string {
  return (
    `idle: ${figures.idleCommandsPerSecond.toFixed(2)} Redis commands per second per process with ${figures.idleSchedules} schedules stored, none due ` +
    `(Redis CPU ${figures.idleRedisMicrosPerSecond.toFixed(0)} µs per second, its own idle work included); ` +
    `firing: ${figures.commandsPerTick.toFixed(1)} Redis commands and ${figures.redisMicrosPerTick.toFixed(0)} µs of Redis CPU per tick ` +
    `(a 100 ms rhythm fired by ${figures.processes} processes at once, ${figures.ticks} ticks in 10 s, each one task)`
  );
}
