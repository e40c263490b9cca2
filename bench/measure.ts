import { GCProfiler } from 'node:v8';
import type { Redis } from 'ioredis';
import { Redis as RedisClass } from 'ioredis';

/** Percentile of a sorted array (nearest rank). */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

/** Server-side counters: commands executed (Lua's own calls included) and Redis CPU. */
export interface ServerSnapshot {
  readonly commands: number;
  readonly cpuMicros: number;
}

export async function serverSnapshot(redis: Redis): Promise<ServerSnapshot> {
  const [commandstats, cpu] = await Promise.all([redis.info('commandstats'), redis.info('cpu')]);
  let commands = 0;
  for (const match of commandstats.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    if (match[1] !== 'info') commands += Number(match[2]);
  }
  const field = (name: string) => Number(new RegExp(`^${name}:([\\d.]+)`, 'm').exec(cpu)?.[1] ?? 0);
  return { commands, cpuMicros: (field('used_cpu_user') + field('used_cpu_sys')) * 1e6 };
}

/**
 * Counts commands sent by every ioredis connection in this process (both libraries use ioredis), as an
 * upper bound of client round trips (pipelined commands count one each).
 */
export const clientCommands = { count: 0 };
const prototype = RedisClass.prototype as unknown as { sendCommand: (...args: unknown[]) => unknown };
const send = prototype.sendCommand;
prototype.sendCommand = function counted(this: unknown, ...args: unknown[]) {
  clientCommands.count++;
  return send.apply(this, args);
};

/** Everything one measured phase cost, per task. */
export interface Cost {
  readonly tasks: number;
  readonly seconds: number;
  readonly redisCommandsPerTask: number;
  readonly clientCommandsPerTask: number;
  readonly redisCpuMicrosPerTask: number;
  readonly nodeCpuMicrosPerTask: number;
}

export async function measure(redis: Redis, tasks: number, run: () => Promise<void>): Promise<Cost> {
  const before = await serverSnapshot(redis);
  const clientBefore = clientCommands.count;
  const cpuBefore = process.cpuUsage();
  const start = performance.now();
  await run();
  const seconds = (performance.now() - start) / 1000;
  const cpu = process.cpuUsage(cpuBefore);
  const clientAfter = clientCommands.count;
  const after = await serverSnapshot(redis);
  return {
    tasks,
    seconds,
    redisCommandsPerTask: (after.commands - before.commands) / tasks,
    clientCommandsPerTask: (clientAfter - clientBefore) / tasks,
    redisCpuMicrosPerTask: (after.cpuMicros - before.cpuMicros) / tasks,
    nodeCpuMicrosPerTask: (cpu.user + cpu.system) / tasks,
  };
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** A counter that resolves `until(n)` once n tasks were handled. */
export class Completion {
  count = 0;
  private waiters: { n: number; resolve: () => void }[] = [];

  hit(): void {
    this.count++;
    for (const waiter of this.waiters.filter((w) => w.n <= this.count)) {
      waiter.resolve();
    }
    this.waiters = this.waiters.filter((w) => w.n > this.count);
  }

  until(n: number, timeoutMs = 300_000): Promise<void> {
    if (this.count >= n) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`only ${this.count} of ${n} tasks handled within ${timeoutMs} ms`)),
        timeoutMs,
      );
      this.waiters.push({
        n,
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
      });
    });
  }

  reset(): void {
    this.count = 0;
    this.waiters = [];
  }
}

/** Deletes every key matching a pattern (bench clean-up only; the library never scans). */
export async function deleteMatching(redis: Redis, pattern: string): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = next;
    if (keys.length > 0) await redis.del(...keys);
  } while (cursor !== '0');
}

/** Bytes Redis uses for keys matching a pattern (MEMORY USAGE summed). */
export async function bytesMatching(redis: Redis, pattern: string): Promise<{ keys: number; bytes: number }> {
  let cursor = '0';
  let keys = 0;
  let bytes = 0;
  do {
    const [next, batch] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = next;
    for (const key of batch) {
      keys++;
      bytes += Number((await redis.memory('USAGE', key, 'SAMPLES', '0')) ?? 0);
    }
  } while (cursor !== '0');
  return { keys, bytes };
}

/**
 * Bytes the scavenges during `run` moved into the old generation: objects that outlived the young
 * generation. Short-lived per-task objects should not; those that do bring on the mark-compacts whose
 * incremental steps (several ms each here) make a latency tail.
 */
export async function promotedDuring(run: () => Promise<void>): Promise<number> {
  const oldSpace = (stats: { heapSpaceStatistics: { spaceName: string; spaceUsedSize: number }[] }) =>
    stats.heapSpaceStatistics.find((space) => space.spaceName === 'old_space')?.spaceUsedSize ?? 0;
  const profiler = new GCProfiler();
  profiler.start();
  await run();
  let promoted = 0;
  for (const gc of profiler.stop()?.statistics ?? []) {
    if (gc.gcType === 'Scavenge') promoted += Math.max(0, oldSpace(gc.afterGC) - oldSpace(gc.beforeGC));
  }
  return promoted;
}

/** A figure over a bench's rounds: the median, with the lowest and highest. */
export interface RoundSample {
  readonly median: number;
  readonly min: number;
  readonly max: number;
}

/** The median, lowest and highest of `values`. */
export function roundSample(values: readonly number[]): RoundSample {
  const sorted = [...values].sort((a, b) => a - b);
  return { median: sorted[Math.floor(sorted.length / 2)], min: sorted[0], max: sorted[sorted.length - 1] };
}

/** A sample as the tables show it: `median (min–max)`. */
export function shownSample(s: RoundSample, digits: number): string {
  return `${s.median.toFixed(digits)} (${s.min.toFixed(digits)}–${s.max.toFixed(digits)})`;
}
