import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { lastValueFrom } from 'rxjs';
import { PrefixKeys } from '../lib/core/redis/keys.js';
import { readScriptDefinitions } from '../lib/core/redis/scripts.js';
import { RedisTaskClient } from '../lib/index.js';
import { childrenCpu, startChildren, stopChildren } from './children.js';
import { deleteMatching, roundSample, serverSnapshot, shownSample, sleep, type RoundSample } from './measure.js';

/** Process and pattern counts of the idle rows. */
const PROCESSES = [1, 5, 20] as const;
const PATTERNS = [1, 50] as const;
/** Other keys in the database for the second half of the rows (an app's own data beside the queues). */
const OTHER_KEYS = 1_000_000;
/** Measured windows per row (the spread is theirs) and their length. */
const WINDOWS = 3;
/**
 * The windows together span a whole renewal period of an idle shard's lease (four times leaseMs, renewed
 * two beats before its end, spread over its last quarter: every 86 to 115 s), so the rates include them.
 */
const WINDOW_MS = 40_000;
/**
 * The anchors' rows: BullMQ and Bee-Queue workers as their documentation sets them up, idle alike, on the
 * rows without other keys at the ends of the range (their idle work does not look at other keys).
 */
const ANCHOR_ROWS = [
  [1, 1],
  [20, 1],
  [1, 50],
  [20, 50],
] as const;
export type IdleLibrary = 'ours' | 'bull' | 'bee';
const LIBRARY_NAMES: Readonly<Record<IdleLibrary, string>> = {
  ours: 'nestjs-redis-tasks',
  bull: 'BullMQ',
  bee: 'Bee-Queue',
};
/**
 * Idle processes of the claim-calls rows and their patterns (a Nest app has several handlers: one pattern is a
 * process whose one claim loop blocks on its shard's bell, several are loops that share one blocking connection),
 * and the tasks sent one at a time to them (all to the first pattern).
 */
const CLAIM_SHAPES = [
  { processes: 1, patterns: 1 },
  { processes: 8, patterns: 1 },
  { processes: 20, patterns: 1 },
  { processes: 8, patterns: 5 },
  { processes: 20, patterns: 5 },
] as const;
const CLAIM_TASKS = 200;

export const IDLE_INTRO = [
  '## Idle replicas: what waking and idling cost Redis',
  '',
  'Worker processes of one deployment (a Nest microservice each, RedisTaskTransport with its defaults and one',
  'handler per pattern), each in its own Node process. First, tasks sent one at a time (each after the last one',
  "ran) to P idle processes of 1 and of 5 patterns: the claim script's calls per task, counted with MONITOR, the processes",
  'subscribed to the wake channel, and the Node CPU of all P processes per task (their idle CPU over as long taken',
  'off). Then P',
  'idle processes of K patterns with nothing queued: the Redis commands per second of the whole deployment',
  "(INFO commandstats, Lua's own commands included) and its Redis CPU in percent of one core (the server's own",
  'idle work taken off), over 3 windows of 40 s (together a whole renewal period of an idle lease), median',
  '(min–max), with and without 1,000,000 other keys in the database; the most sent commands per second beside them.',
  'BullMQ (one `Worker` per queue sharing one connection) and Bee-Queue (one worker `Queue` per queue, `process()`',
  'called, its defaults) idle alike beside them, at 1 and 20 processes of 1 and 50 queues, without other keys.',
];

export interface IdleRow {
  readonly library: IdleLibrary;
  readonly processes: number;
  readonly patterns: number;
  readonly otherKeys: number;
  readonly commandsPerSecond: RoundSample;
  /** Redis CPU of the deployment in percent of one core, the server's own idle work taken off. */
  readonly cpuPercent: RoundSample;
  /** Commands by name over all windows (for the reading below the table). */
  readonly top: string;
  readonly scans: number;
}

export interface ClaimRow {
  readonly processes: number;
  readonly patterns: number;
  /** claimTasks calls that asked for tasks (ARGV[1] > 0), per task. */
  readonly claimCallsPerTask: number;
  /** Every claimTasks call (acknowledgements alone included), per task. */
  readonly scriptCallsPerTask: number;
  /** Connections subscribed to the shard's wake channel (each hears every wake message). */
  readonly wakeListeners: number;
  /** Node CPU of all the processes per task (µs), their idle CPU over as long taken off. */
  readonly nodeMicrosPerTask: number;
}

/** P idle worker processes of K patterns (idle-child.ts), five starting at a time. */
function startWorkers(
  url: string,
  prefix: string,
  count: number,
  patterns: number,
  library: IdleLibrary = 'ours',
): Promise<ChildProcess[]> {
  // A few at a time: twenty Nest processes starting at once on two cores take turns anyway.
  const env = {
    BENCH_IDLE_URL: url,
    BENCH_IDLE_PREFIX: prefix,
    BENCH_IDLE_PATTERNS: String(patterns),
    BENCH_IDLE_LIBRARY: library,
  };
  return startChildren('./idle-child.js', count, env, 5);
}

async function commandCalls(redis: Redis): Promise<Map<string, number>> {
  const calls = new Map<string, number>();
  for (const match of (await redis.info('commandstats')).matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    if (match[1] !== 'info') calls.set(match[1], Number(match[2]));
  }
  return calls;
}

/** Redis CPU (µs per second) with nothing connected but this probe: the server's own idle work. */
async function serverIdleCpu(redis: Redis): Promise<number> {
  const before = await serverSnapshot(redis);
  const start = performance.now();
  await sleep(WINDOW_MS);
  const after = await serverSnapshot(redis);
  return (after.cpuMicros - before.cpuMicros) / ((performance.now() - start) / 1_000);
}

async function idleRow(
  url: string,
  processes: number,
  patterns: number,
  otherKeys: number,
  baseCpu: number,
  library: IdleLibrary = 'ours',
): Promise<IdleRow> {
  const redis = new Redis(url);
  const prefix = `rtidle${randomBytes(3).toString('hex')}`;
  const children = await startWorkers(url, prefix, processes, patterns, library);
  try {
    // Past every start-up step (registrations, first sweeps, the first schedule check).
    await sleep(3_000);
    const rates: number[] = [];
    const cpus: number[] = [];
    const totals = new Map<string, number>();
    for (let w = 0; w < WINDOWS; w++) {
      const callsBefore = await commandCalls(redis);
      const before = await serverSnapshot(redis);
      const start = performance.now();
      await sleep(WINDOW_MS);
      const after = await serverSnapshot(redis);
      const callsAfter = await commandCalls(redis);
      const seconds = (performance.now() - start) / 1_000;
      // The two INFO reads of a window are not counted (serverSnapshot leaves INFO out).
      rates.push((after.commands - before.commands) / seconds);
      cpus.push(Math.max(0, (after.cpuMicros - before.cpuMicros) / seconds - baseCpu) / 1e4);
      for (const [name, calls] of callsAfter)
        totals.set(name, (totals.get(name) ?? 0) + calls - (callsBefore.get(name) ?? 0));
    }
    const seconds = (WINDOWS * WINDOW_MS) / 1_000;
    const top = [...totals]
      .filter(([, calls]) => calls > 0)
      .sort((a, b) => b[1] - a[1])
      .slice(0, 6)
      .map(([name, calls]) => `${name} ${(calls / seconds).toFixed(1)}/s`)
      .join(', ');
    return {
      library,
      processes,
      patterns,
      otherKeys,
      commandsPerSecond: roundSample(rates),
      cpuPercent: roundSample(cpus),
      top,
      scans: totals.get('scan') ?? 0,
    };
  } finally {
    await stopChildren(children);
    await deleteMatching(redis, `${prefix}:*`);
    redis.disconnect();
  }
}

function logRow(row: IdleRow): void {
  console.log(
    `idle ${LIBRARY_NAMES[row.library]}: ${row.processes} processes x ${row.patterns} patterns, ${row.otherKeys} other keys: ${shownSample(row.commandsPerSecond, 1)} commands/s, ${shownSample(row.cpuPercent, 2)}% CPU; ${row.top}`,
  );
}

async function fillOtherKeys(redis: Redis, count: number): Promise<void> {
  for (let i = 0; i < count; i += 10_000) {
    const pipeline = redis.pipeline();
    for (let j = i; j < i + 10_000; j += 1_000) {
      const args: string[] = [];
      for (let k = j; k < j + 1_000; k++) args.push(`rtother:${k}`, 'x');
      pipeline.mset(...args);
    }
    await pipeline.exec();
  }
}

/** Commands and Redis CPU of P idle worker processes of K patterns each, with and without other keys. */
export async function idleRows(url: string): Promise<IdleRow[]> {
  const redis = new Redis(url);
  const rows: IdleRow[] = [];
  try {
    for (const otherKeys of [0, OTHER_KEYS]) {
      if (otherKeys > 0) await fillOtherKeys(redis, otherKeys);
      const baseCpu = await serverIdleCpu(redis);
      for (const patterns of PATTERNS) {
        for (const processes of PROCESSES) {
          const row = await idleRow(url, processes, patterns, otherKeys, baseCpu);
          logRow(row);
          rows.push(row);
        }
      }
    }
  } finally {
    await deleteMatching(redis, 'rtother:*');
    redis.disconnect();
  }
  return rows;
}

/** The same rows for BullMQ and Bee-Queue (ANCHOR_ROWS, no other keys). */
export async function anchorIdleRows(url: string): Promise<IdleRow[]> {
  const redis = new Redis(url);
  const rows: IdleRow[] = [];
  try {
    const baseCpu = await serverIdleCpu(redis);
    for (const library of ['bull', 'bee'] as const) {
      for (const [processes, patterns] of ANCHOR_ROWS) {
        const row = await idleRow(url, processes, patterns, 0, baseCpu, library);
        logRow(row);
        rows.push(row);
      }
    }
  } finally {
    redis.disconnect();
  }
  return rows;
}

/** The claim script's calls per task, counted with MONITOR, when tasks come one at a time to P idle processes. */
/**
 * Emits `count` tasks of `idle.p0`, one at a time: each meets idle processes, the next sent once this one was
 * taken and settled (10 ms later).
 */
async function sendOneAtATime(client: RedisTaskClient, count: number): Promise<void> {
  for (let i = 0; i < count; i++) {
    await lastValueFrom(client.emit('idle.p0', { i }), { defaultValue: undefined });
    await sleep(10);
  }
}

export async function claimRows(url: string): Promise<ClaimRow[]> {
  const claimShas = new Set(
    readScriptDefinitions()
      .filter((script) => script.name === 'claimTasks')
      .flatMap((script) => [script.sha, script.flagged.sha]),
  );
  const rows: ClaimRow[] = [];
  for (const { processes, patterns } of CLAIM_SHAPES) {
    const prefix = `rtclaim${randomBytes(3).toString('hex')}`;
    const children = await startWorkers(url, prefix, processes, patterns);
    const client = new RedisTaskClient({ connection: url, prefix });
    const monitor = new Redis(url);
    let claims = 0;
    let calls = 0;
    try {
      await client.connect();
      await sleep(2_000);
      // A warm-up, not counted: the task path of the processes compiled (at first it costs a multiple).
      await sendOneAtATime(client, CLAIM_TASKS);
      await sleep(1_000);
      const { wakeChannel } = new PrefixKeys(prefix).queue('idle.p0');
      const wakeListeners = Number(((await client.unwrap().pubsub('NUMSUB', wakeChannel)) as [string, number])[1]);
      const feed = await monitor.monitor();
      feed.on('monitor', (_time: string, args: string[]) => {
        if (args[0]?.toLowerCase() !== 'evalsha' || !claimShas.has(args[1])) return;
        calls++;
        // ARGV[1] (tasks wanted) follows the one key: 0 is an acknowledgement alone.
        if (Number(args[4]) > 0) claims++;
      });
      const cpuBefore = await childrenCpu(children);
      const start = performance.now();
      await sendOneAtATime(client, CLAIM_TASKS);
      await sleep(1_000);
      const busyMs = performance.now() - start;
      const cpuBusy = (await childrenCpu(children)) - cpuBefore;
      feed.disconnect();
      // As long again with nothing sent: what the processes use idle (heartbeats, backstop claims) is taken off.
      const idleStart = performance.now();
      const cpuIdleBefore = await childrenCpu(children);
      await sleep(busyMs);
      const cpuIdle = ((await childrenCpu(children)) - cpuIdleBefore) * (busyMs / (performance.now() - idleStart));
      const nodeMicrosPerTask = (cpuBusy - cpuIdle) / CLAIM_TASKS;
      rows.push({
        processes,
        patterns,
        claimCallsPerTask: claims / CLAIM_TASKS,
        scriptCallsPerTask: calls / CLAIM_TASKS,
        wakeListeners,
        nodeMicrosPerTask,
      });
      console.log(
        `claim calls per task with ${processes} idle processes of ${patterns} patterns: ${(claims / CLAIM_TASKS).toFixed(2)} (all claimTasks calls ${(calls / CLAIM_TASKS).toFixed(2)}); ` +
          `${wakeListeners} hearing the wake channel; Node CPU ${nodeMicrosPerTask.toFixed(0)} µs per task, all processes`,
      );
    } finally {
      monitor.disconnect();
      await client.close();
      await stopChildren(children);
      const cleanup = new Redis(url);
      await deleteMatching(cleanup, `${prefix}:*`);
      cleanup.disconnect();
    }
  }
  return rows;
}

export function idleTable(rows: readonly IdleRow[]): string {
  return [
    '| library | idle processes × patterns | other keys | Redis commands/s (all processes) | Redis CPU, % of a core | SCANs in the windows | most sent |',
    '|---|---|---:|---:|---:|---:|---|',
    ...rows.map(
      (row) =>
        `| ${LIBRARY_NAMES[row.library]} | ${row.processes} × ${row.patterns} | ${row.otherKeys.toLocaleString('en')} | ${shownSample(row.commandsPerSecond, 1)} | ${shownSample(row.cpuPercent, 2)} | ${row.scans} | ${row.top} |`,
    ),
  ].join('\n');
}

export function claimTable(rows: readonly ClaimRow[]): string {
  return [
    '| idle worker processes × patterns | claims per task (calls asking for tasks) | claimTasks calls per task (acknowledgements alone included) | processes hearing each wake message | Node CPU per task, all processes (µs) |',
    '|---:|---:|---:|---:|---:|',
    ...rows.map(
      (row) =>
        `| ${row.processes} × ${row.patterns} | ${row.claimCallsPerTask.toFixed(2)} | ${row.scriptCallsPerTask.toFixed(2)} | ${row.wakeListeners} | ${row.nodeMicrosPerTask.toFixed(0)} |`,
    ),
  ].join('\n');
}
