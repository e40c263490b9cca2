import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { TaskAdmin } from '../lib/core/admin/admin.js';
import { PrefixKeys } from '../lib/core/redis/keys.js';
import { QueueLayouts } from '../lib/core/redis/layouts.js';
import { defineScripts } from '../lib/core/redis/scripts.js';
import { startChildren, stopChildren } from './children.js';
import { deleteMatching, roundSample, shownSample, sleep, type RoundSample } from './measure.js';

/** Schedules due at the same tick in the crowd row. */
export const CROWD = 20_000;
/** Runs per process count: the spread is theirs. */
const RUNS = 3;
const GRACE_MS = 10_000;

export interface CrowdFigures {
  readonly schedules: number;
  /** Per process count: ticks fired per second (from the tick to the last task written), per run. */
  readonly rows: readonly { processes: number; ticksPerSecond: RoundSample; lastLateMs: RoundSample; missed: number }[];
}

/** One run: CROWD schedules due at one tick 1.5 s ahead, fired by `processes` processes; seconds to the last task. */
async function crowdRun(
  url: string,
  processes: number,
): Promise<{ seconds: number; lastLateMs: number; missed: number }> {
  const prefix = `rtcrowd${randomBytes(3).toString('hex')}`;
  const plain = new Redis(url);
  const redis = defineScripts(plain);
  const keys = new PrefixKeys(prefix);
  try {
    const admin = TaskAdmin.forPrefix(redis, prefix);
    await new QueueLayouts(redis, keys, 1).layout('bench.crowd');
    for (let i = 0; i < CROWD; i += 1_000) {
      await Promise.all(
        Array.from({ length: 1_000 }, (_, j) =>
          admin.upsertSchedule(`c${i + j}`, { pattern: 'bench.crowd', cron: '0 3 * * *', payload: { n: i + j } }),
        ),
      );
    }
    const [seconds, micros] = await redis.time();
    const tick = Number(seconds) * 1_000 + Math.floor(Number(micros) / 1_000) + 1_500;
    for (let i = 0; i < CROWD; i += 1_000) {
      const members: (string | number)[] = [];
      for (let j = i; j < i + 1_000; j++) members.push(tick, `c${j}`);
      await redis.zadd(keys.schedules.due, ...members);
    }
    const children = await startChildren('./ticker-child.js', processes, {
      BENCH_TICKER_URL: url,
      BENCH_TICKER_PREFIX: prefix,
    });
    const cpuBefore = await redisCpuMicros(plain);
    const pending = keys.queue('bench.crowd').pending('schedules');
    let done = 0;
    while (Date.now() < tick + 60_000) {
      if ((await redis.llen(pending)) >= CROWD) {
        const [s, us] = await redis.time();
        done = Number(s) * 1_000 + Math.floor(Number(us) / 1_000);
        break;
      }
      await sleep(5);
    }
    const redisCpu = (await redisCpuMicros(plain)) - cpuBefore;
    console.log(`crowd ${processes}: Redis CPU ${(redisCpu / 1000).toFixed(0)} ms over ${done - tick} ms`);
    await stopChildren(children);
    const missed = (await admin.listSchedules()).reduce((sum, listed) => sum + listed.state.missed, 0);
    if (done === 0) throw new Error(`the crowd of ${CROWD} schedules was not fired within 60 s`);
    return { seconds: (done - tick) / 1_000, lastLateMs: done - tick, missed };
  } finally {
    await deleteMatching(plain, `${prefix}:*`);
    plain.disconnect();
  }
}

/** How fast the processes of a deployment fire schedules due at one tick, with 1 and 3 of them. */
export async function crowdFigures(url: string): Promise<CrowdFigures> {
  const rows = [];
  for (const processes of [1, 3]) {
    const runs = [];
    for (let run = 0; run < RUNS; run++) runs.push(await crowdRun(url, processes));
    rows.push({
      processes,
      ticksPerSecond: roundSample(runs.map((run) => CROWD / run.seconds)),
      lastLateMs: roundSample(runs.map((run) => run.lastLateMs)),
      missed: runs.reduce((sum, run) => sum + run.missed, 0),
    });
  }
  return { schedules: CROWD, rows };
}

export function crowdLines(figures: CrowdFigures): string {
  return figures.rows
    .map(
      (row) =>
        `${figures.schedules.toLocaleString('en')} schedules due at one tick, ${row.processes} process${row.processes > 1 ? 'es' : ''}: ` +
        `${shownSample(row.ticksPerSecond, 0)} ticks fired per second, the last task written ${shownSample(row.lastLateMs, 0)} ms after the tick ` +
        `(${row.lastLateMs.max <= GRACE_MS ? 'all within' : 'past'} the 10 s grace), ${row.missed} counted missed over ${RUNS} runs`,
    )
    .join('\n');
}

async function redisCpuMicros(redis: Redis): Promise<number> {
  const info = await redis.info('cpu');
  const field = (name: string) => Number(new RegExp(`${name}:([0-9.]+)`).exec(info)?.[1] ?? 0);
  return (field('used_cpu_sys') + field('used_cpu_user')) * 1e6;
}
