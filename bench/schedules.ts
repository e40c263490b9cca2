import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { TaskAdmin } from '../lib/core/admin/admin.js';
import { PrefixKeys } from '../lib/core/redis/keys.js';
import { QueueLayouts } from '../lib/core/redis/layouts.js';
import { defineScripts } from '../lib/core/redis/scripts.js';
import { SCHEDULE_LIMITS } from '../lib/core/schedules/tick-firer.js';
import { ScheduleTicker } from '../lib/core/schedules/ticker.js';
import { silentLogger } from '../lib/core/support/logger.js';
import { deleteMatching, roundSample, serverSnapshot, shownSample, sleep, type RoundSample } from './measure.js';

export interface ScheduleFigures {
  /** Schedules stored, none due, for the idle row. */
  readonly idleSchedules: number;
  /** Redis commands per second per process while nothing is due (Lua included), per window. */
  readonly idleCommandsPerSecond: RoundSample;
  /** Redis CPU per second (µs) meanwhile: the server's own idle work (its cron) included. */
  readonly idleRedisMicrosPerSecond: RoundSample;
  /** Firing processes of the ticking row. */
  readonly processes: number;
  /** Ticks fired (one task each) in the ticking row, over all windows. */
  readonly ticks: number;
  /** Redis commands per tick, every process's checks included (Lua included), per window. */
  readonly commandsPerTick: RoundSample;
  /** Redis CPU per tick (µs), per window. */
  readonly redisMicrosPerTick: RoundSample;
}

/** Each row is measured over WINDOWS consecutive windows of WINDOW_MS (10 s in all): the spread is theirs. */
const WINDOWS = 5;
const WINDOW_MS = 2_000;

/**
 * Server snapshots at the edges of WINDOWS windows, and before each window's start what `mark` reads
 * (one command of its own at most, counted out by the caller).
 */
async function windows(server: Redis, mark: () => Promise<number>) {
  const edges = [{ snapshot: await serverSnapshot(server), mark: await mark() }];
  for (let w = 0; w < WINDOWS; w++) {
    await sleep(WINDOW_MS);
    edges.push({ snapshot: await serverSnapshot(server), mark: await mark() });
  }
  return edges.slice(1).map((edge, w) => ({
    commands: edge.snapshot.commands - edges[w].snapshot.commands,
    cpuMicros: edge.snapshot.cpuMicros - edges[w].snapshot.cpuMicros,
    marked: edge.mark - edges[w].mark,
  }));
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
    const idleWindows = await windows(server, async () => 0);
    await idle.close();
    await deleteMatching(server, `${prefix}:*`);

    // The pattern's workers have run (its shard count is on record): a schedule never decides it.
    await new QueueLayouts(open(), new PrefixKeys(prefix), 1).layout('bench.sched');
    await admin.upsertSchedule('pulse', { pattern: 'bench.sched', everyMs: 100, overlap: 'allow' });
    const queue = new PrefixKeys(prefix).queue('bench.sched').pending('schedules');
    const processes = 3;
    const tickers = Array.from({ length: processes }, () => ticker());
    await sleep(1_000);
    // The LLEN at each window's start is this measure's, not the schedules'.
    const firing = await windows(server, () => server.llen(queue));
    await Promise.all(tickers.map((each) => each.close()));
    const seconds = WINDOW_MS / 1000;
    return {
      idleSchedules,
      idleCommandsPerSecond: roundSample(idleWindows.map((w) => w.commands / seconds)),
      idleRedisMicrosPerSecond: roundSample(idleWindows.map((w) => w.cpuMicros / seconds)),
      processes,
      ticks: firing.reduce((sum, w) => sum + w.marked, 0),
      commandsPerTick: roundSample(firing.map((w) => (w.commands - 1) / w.marked)),
      redisMicrosPerTick: roundSample(firing.map((w) => w.cpuMicros / w.marked)),
    };
  } finally {
    await deleteMatching(server, `${prefix}:*`);
    server.disconnect();
    for (const connection of connections) connection.disconnect();
  }
}

export function scheduleLine(figures: ScheduleFigures): string {
  return (
    `idle: ${shownSample(figures.idleCommandsPerSecond, 2)} Redis commands per second per process with ${figures.idleSchedules} schedules stored, none due, ` +
    `for a ticker that hears no stores and checks every second (RedisTaskReaper's; a worker's sleeps until the earliest tick and sends none: see the idle rows) ` +
    `(Redis CPU ${shownSample(figures.idleRedisMicrosPerSecond, 0)} µs per second, its own idle work included); ` +
    `firing: ${shownSample(figures.commandsPerTick, 1)} Redis commands and ${shownSample(figures.redisMicrosPerTick, 0)} µs of Redis CPU per tick ` +
    `(a 100 ms rhythm fired by ${figures.processes} processes at once, ${figures.ticks} ticks in ${(WINDOWS * WINDOW_MS) / 1000} s, each one task; ` +
    `median of ${WINDOWS} windows of ${WINDOW_MS / 1000} s, lowest and highest in parentheses)`
  );
}
