import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { OverviewReader } from '../lib/core/admin/overview.js';
import { PrefixKeys } from '../lib/core/redis/keys.js';
import { defineScripts, type TaskRedis } from '../lib/core/redis/scripts.js';
import { RedisTaskClient, RedisTaskRecordBuilder } from '../lib/index.js';
import { deleteMatching } from './measure.js';

export interface DashboardFigures {
  readonly patterns: number;
  readonly clients: number;
  /** One overview refresh (every pattern), ms: median, min, max of the runs. */
  readonly refreshMs: { median: number; min: number; max: number };
  /** Redis time of one shard's readOverview call (µs, INFO commandstats of EVALSHA during the refreshes). */
  readonly redisMicrosPerPattern: number;
}

/**
 * The dashboard's cost at scale: `patterns` patterns of `clients` clients (one waiting task each, so
 * every client is on its pattern's ring), then the overview read as the page's refresh reads it.
 */
export async function dashboardScale(
  url: string,
  patterns = 100,
  clients = 10_000,
  runs = 7,
): Promise<DashboardFigures> {
  const prefix = `rtdash${randomBytes(3).toString('hex')}`;
  const producer = new RedisTaskClient({ connection: url, prefix, tracing: false });
  await producer.connect();
  for (let p = 0; p < patterns; p++) {
    const records = Array.from({ length: clients }, (_, c) =>
      new RedisTaskRecordBuilder({ c }).setClientId(`tenant-${c}`).build(),
    );
    await producer.emitBatch(`dash.pattern.${p}`, records);
  }
  await producer.close();
  const redis: TaskRedis = defineScripts(new Redis(url));
  const keys = new PrefixKeys(prefix);
  const reader = OverviewReader.forPrefix(redis, keys.prefix);
  await reader.overview(); // warm-up: layouts read once, scripts loaded
  await (redis as unknown as Redis).config('RESETSTAT');
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    const start = performance.now();
    const overview = await reader.overview();
    times.push(performance.now() - start);
    if (overview.patterns.length !== patterns || overview.patterns.some((row) => row.pending !== clients))
      throw new Error('the overview does not match what was enqueued');
  }
  const stats = await (redis as unknown as Redis).info('commandstats');
  const evalsha = /cmdstat_evalsha:calls=(\d+),usec=(\d+)/.exec(stats);
  times.sort((a, b) => a - b);
  await deleteMatching(redis as unknown as Redis, `${prefix}:*`);
  (redis as unknown as Redis).disconnect();
  return {
    patterns,
    clients,
    refreshMs: { median: times[Math.floor(times.length / 2)], min: times[0], max: times[times.length - 1] },
    redisMicrosPerPattern: evalsha ? Number(evalsha[2]) / Number(evalsha[1]) : Number.NaN,
  };
}

export function dashboardLine(figures: DashboardFigures): string {
  const { median, min, max } = figures.refreshMs;
  return (
    `dashboard overview, ${figures.patterns} patterns x ${figures.clients.toLocaleString('en-US')} clients: ${median.toFixed(1)} ms per refresh ` +
    `(${min.toFixed(1)}–${max.toFixed(1)}); Redis time per pattern ${figures.redisMicrosPerPattern.toFixed(0)} µs`
  );
}
