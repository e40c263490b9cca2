import 'reflect-metadata';
import { readFileSync, writeFileSync } from 'node:fs';
import { cpus, totalmem, type } from 'node:os';
import { Redis } from 'ioredis';
import { BullMqDriver, OursDriver, type BenchTask, type Driver } from './drivers.js';
import { durabilitySettings, measureDurability, type DurabilityFigures } from './durability.js';
import { bytesMatching, Completion, deleteMatching, measure, percentile, sleep, type Cost } from './measure.js';

const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const DRAIN_TASKS = Number(process.env.BENCH_DRAIN_TASKS ?? 20_000);
const SINGLE_TASKS = Number(process.env.BENCH_SINGLE_TASKS ?? 5_000);
const LATENCY_TASKS = Number(process.env.BENCH_LATENCY_TASKS ?? 10_000);
const FLOOD_TASKS = Number(process.env.BENCH_FLOOD_TASKS ?? 100_000);
const BATCH = 1_000;
/** Throughput phases run this many times; the median is reported (a 2-core machine is noisy). */
const REPEATS = Number(process.env.BENCH_REPEATS ?? 3);

async function median(run: () => Promise<number>): Promise<number> {
  const results: number[] = [];
  for (let i = 0; i < REPEATS; i++) results.push(await run());
  return results.sort((a, b) => a - b)[Math.floor(results.length / 2)];
}

interface Figures {
  enqueueSingle: number;
  enqueueBatch: number;
  drain: Record<number, number>;
  latencyP50: number;
  latencyP99: number;
  cost: Cost;
  bytesPerPending: number;
  keysLeftAfterDrain: number;
  bytesLeftAfterDrain: number;
  fairnessDelayMs: number;
}

const redis = new Redis(url);
const done = new Completion();
const tasks = (n: number, from = 0): BenchTask[] => Array.from({ length: n }, (_, i) => ({ i: from + i, t: performance.now() }));
const log = (line: string) => console.log(line);

async function fill(driver: Driver, n: number, clientId?: string | ((index: number) => string)): Promise<void> {
  for (let start = 0; start < n; start += BATCH) {
    const size = Math.min(BATCH, n - start);
    const offset = start;
    await driver.enqueueBatch(tasks(size, start), typeof clientId === 'function' ? (i) => clientId(offset + i) : clientId);
  }
}

async function enqueueSingle(driver: Driver): Promise<number> {
  await driver.begin('single');
  for (const task of tasks(500)) await driver.enqueue(task); // warm-up, not timed
  const start = performance.now();
  for (const task of tasks(SINGLE_TASKS)) await driver.enqueue(task);
  const rate = SINGLE_TASKS / ((performance.now() - start) / 1000);
  await deleteMatching(redis, driver.keyPattern);
  return rate;
}

async function enqueueBatch(driver: Driver): Promise<number> {
  await driver.begin('batch');
  const start = performance.now();
  await fill(driver, DRAIN_TASKS);
  const rate = DRAIN_TASKS / ((performance.now() - start) / 1000);
  await deleteMatching(redis, driver.keyPattern);
  return rate;
}

/** Pre-fills the queue, then times the worker draining it. */
async function drain(driver: Driver, concurrency: number, memory?: (pending: { bytes: number }) => void, clients?: (index: number) => string): Promise<number> {
  await driver.begin(`drain${concurrency}`);
  await fill(driver, DRAIN_TASKS, clients);
  if (memory) memory(await bytesMatching(redis, driver.keyPattern));
  done.reset();
  const start = performance.now();
  await driver.startWorker(concurrency, () => done.hit());
  await done.until(DRAIN_TASKS);
  const rate = DRAIN_TASKS / ((performance.now() - start) / 1000);
  await driver.stopWorker();
  return rate;
}

/** Worker at concurrency 16 running; single enqueues, 64 in flight; everything a task costs end to end. */
async function endToEnd(driver: Driver): Promise<Cost> {
  await driver.begin('e2e');
  done.reset();
  await driver.startWorker(16, () => done.hit());
  const cost = await measure(redis, DRAIN_TASKS, async () => {
    let next = 0;
    await Promise.all(
      Array.from({ length: 64 }, async () => {
        while (next < DRAIN_TASKS) {
          const i = next++;
          await driver.enqueue({ i, t: performance.now() });
        }
      }),
    );
    await done.until(DRAIN_TASKS);
  });
  await driver.stopWorker();
  await deleteMatching(redis, driver.keyPattern);
  return cost;
}

/** Enqueue -> handler start at a steady rate (2,000 tasks/s), worker at concurrency 16. */
async function latency(driver: Driver): Promise<{ p50: number; p99: number }> {
  await driver.begin('latency');
  const samples: number[] = [];
  done.reset();
  await driver.startWorker(16, (task) => {
    samples.push(performance.now() - task.t);
    done.hit();
  });
  const warmup = 500;
  const total = warmup + LATENCY_TASKS;
  const start = performance.now();
  const inFlight: Promise<void>[] = [];
  let sent = 0;
  while (sent < total) {
    const due = Math.floor((performance.now() - start) * 2); // 2 tasks per ms
    while (sent < Math.min(due, total)) {
      inFlight.push(driver.enqueue({ i: sent, t: performance.now() }));
      sent++;
    }
    await sleep(1);
  }
  await Promise.all(inFlight);
  await done.until(total);
  await driver.stopWorker();
  await deleteMatching(redis, driver.keyPattern);
  const sorted = samples.slice(warmup).sort((a, b) => a - b);
  return { p50: percentile(sorted, 50), p99: percentile(sorted, 99) };
}

/** One client has FLOOD_TASKS pending; how long until another client's single task starts? */
async function fairness(driver: Driver): Promise<number> {
  await driver.begin('fairness');
  await fill(driver, FLOOD_TASKS, 'flood');
  let vipStarted: (at: number) => void = () => undefined;
  const vip = new Promise<number>((resolve) => (vipStarted = resolve));
  done.reset();
  await driver.startWorker(16, (task) => {
    if (task.i === -1) vipStarted(performance.now());
    done.hit();
  });
  await done.until(1_000);
  const sentAt = performance.now();
  await driver.enqueue({ i: -1, t: sentAt }, 'vip');
  const startedAt = await Promise.race([vip, sleep(120_000).then(() => Number.POSITIVE_INFINITY)]);
  await driver.stopWorker();
  await deleteMatching(redis, driver.keyPattern);
  return startedAt - sentAt;
}

async function run(driver: Driver): Promise<Figures> {
  log(`\n== ${driver.name}`);
  const figures = {} as Figures;
  figures.enqueueSingle = await enqueueSingle(driver);
  log(`enqueue, single awaited: ${figures.enqueueSingle.toFixed(0)} tasks/s`);
  figures.enqueueBatch = await median(() => enqueueBatch(driver));
  log(`enqueue, batches of ${BATCH}: ${figures.enqueueBatch.toFixed(0)} tasks/s`);
  figures.drain = {};
  for (const concurrency of [1, 16, 64]) {
    const memory = concurrency === 16 ? (m: { bytes: number }) => (figures.bytesPerPending = m.bytes / DRAIN_TASKS) : undefined;
    figures.drain[concurrency] = await median(async () => {
      const rate = await drain(driver, concurrency, memory);
      if (concurrency === 16) {
        const left = await bytesMatching(redis, driver.keyPattern);
        figures.keysLeftAfterDrain = left.keys;
        figures.bytesLeftAfterDrain = left.bytes;
      }
      await deleteMatching(redis, driver.keyPattern);
      return rate;
    });
    log(`drain ${DRAIN_TASKS} at concurrency ${concurrency}: ${figures.drain[concurrency].toFixed(0)} tasks/s`);
    if (concurrency === 16) {
      log(`memory: ${figures.bytesPerPending.toFixed(0)} bytes per pending task; after the drain ${figures.keysLeftAfterDrain} keys (${figures.bytesLeftAfterDrain} bytes) left`);
    }
  }
  const { p50, p99 } = await latency(driver);
  figures.latencyP50 = p50;
  figures.latencyP99 = p99;
  log(`enqueue -> handler start at 2,000 tasks/s: p50 ${p50.toFixed(2)} ms, p99 ${p99.toFixed(2)} ms`);
  figures.cost = await endToEnd(driver);
  const c = figures.cost;
  log(
    `end to end (c=16): ${(c.tasks / c.seconds).toFixed(0)} tasks/s; per task ${c.redisCommandsPerTask.toFixed(2)} Redis commands (Lua included), ` +
      `${c.clientCommandsPerTask.toFixed(2)} client commands, Redis CPU ${c.redisCpuMicrosPerTask.toFixed(1)} µs, Node CPU ${c.nodeCpuMicrosPerTask.toFixed(1)} µs`,
  );
  figures.fairnessDelayMs = await fairness(driver);
  log(`fairness: another client's task started ${formatMs(figures.fairnessDelayMs)} after its enqueue, behind ${FLOOD_TASKS} pending of one client`);
  return figures;
}

/** Median drain rates with 10 and with 10,000 clients, runs interleaved so drift hits both alike. */
async function scale(driver: OursDriver): Promise<[number, number]> {
  const few: number[] = [];
  const many: number[] = [];
  for (let i = 0; i < REPEATS; i++) {
    few.push(await drain(driver, 16, undefined, (index) => `client-${index % 10}`));
    await deleteMatching(redis, driver.keyPattern);
    many.push(await drain(driver, 16, undefined, (index) => `client-${index % 10_000}`));
    await deleteMatching(redis, driver.keyPattern);
  }
  const mid = (values: number[]) => values.sort((a, b) => a - b)[Math.floor(values.length / 2)];
  return [mid(few), mid(many)];
}

function formatMs(ms: number): string {
  return Number.isFinite(ms) ? `${ms.toFixed(1)} ms` : '> 120 s (not started)';
}

/**
 * Consumer groups: 20,000 tasks emitted to N groups (one worker of concurrency 16 each, in this same
 * process), timed until every group handled every task. Returns tasks/s (each task once per group).
 */
async function groupsDrain(driver: OursDriver, groups: number): Promise<number> {
  await driver.begin(`groups${groups}`);
  const names = Array.from({ length: groups }, (_, i) => `g${i}`);
  // Register the groups (a group gets the tasks emitted after it first started), then stop them.
  await driver.startGroupWorkers(names, 16, () => undefined);
  await driver.stopWorker();
  await fill(driver, DRAIN_TASKS);
  done.reset();
  const start = performance.now();
  await driver.startGroupWorkers(names, 16, () => done.hit());
  await done.until(DRAIN_TASKS * groups);
  const rate = DRAIN_TASKS / ((performance.now() - start) / 1000);
  await driver.stopWorker();
  await deleteMatching(redis, driver.keyPattern);
  return rate;
}

/** Single and batch enqueue rates under each durability setting, as a Markdown table. */
async function durability(): Promise<string> {
  log('\n== durability settings (nestjs-redis-tasks enqueue)');
  const settings = durabilitySettings(url);
  await measureDurability(settings[0]); // warm-up (JIT), not reported
  // Rounds interleave the settings so drift on a noisy machine hits all alike; medians are reported.
  const rounds: DurabilityFigures[][] = [];
  for (let round = 0; round < REPEATS; round++) {
    const results: DurabilityFigures[] = [];
    for (const setting of settings) results.push(await measureDurability(setting));
    rounds.push(results);
  }
  const mid = (values: number[]) => values.sort((a, b) => a - b)[Math.floor(values.length / 2)];
  const figures = settings.map((setting, i): DurabilityFigures => ({
    name: setting.name,
    single: mid(rounds.map((round) => round[i].single)),
    batch: mid(rounds.map((round) => round[i].batch)),
  }));
  for (const result of figures) {
    log(`${result.name}: single awaited emit ${result.single.toFixed(0)} tasks/s, emitBatch of 1,000 ${result.batch.toFixed(0)} tasks/s`);
  }
  const base = figures[0];
  return [
    '| setting | single awaited emit (tasks/s) | vs. none | emitBatch of 1,000 (tasks/s) | vs. none |',
    '|---|---:|---:|---:|---:|',
    ...figures.map(
      (f) => `| ${f.name} | ${f.single.toFixed(0)} | ${((f.single / base.single) * 100).toFixed(0)}% | ${f.batch.toFixed(0)} | ${((f.batch / base.batch) * 100).toFixed(0)}% |`,
    ),
  ].join('\n');
}

async function main(): Promise<void> {
  if (process.env.BENCH_ONLY === 'groups') {
    const driver = new OursDriver(url);
    const one = await median(() => groupsDrain(driver, 1));
    const three = await median(() => groupsDrain(driver, 3));
    log(`1 group: ${one.toFixed(0)} tasks/s; 3 groups: ${three.toFixed(0)} tasks/s (${((three / one) * 100).toFixed(1)}%)`);
    await driver.close();
    await redis.quit();
    return;
  }
  if (process.env.BENCH_ONLY === 'durability') {
    log(`\n${await durability()}`);
    await redis.quit();
    return;
  }
  const serverInfo = await redis.info('server');
  const redisVersion = /redis_version:(\S+)/.exec(serverInfo)?.[1];
  const ours = new OursDriver(url);
  const bull = new BullMqDriver(url);
  const a = await run(ours);
  const b = await run(bull);
  log('\n== scale (nestjs-redis-tasks): drain 20,000 at concurrency 16');
  const [few, many] = await scale(ours);
  log(`10 clients: ${few.toFixed(0)} tasks/s; 10,000 clients: ${many.toFixed(0)} tasks/s (${((many / few) * 100).toFixed(1)}%)`);
  log('\n== consumer groups (nestjs-redis-tasks): drain 20,000, one worker of concurrency 16 per group');
  const oneGroup = await median(() => groupsDrain(ours, 1));
  const threeGroups = await median(() => groupsDrain(ours, 3));
  log(`1 group: ${oneGroup.toFixed(0)} tasks/s; 3 groups: ${threeGroups.toFixed(0)} tasks/s, each task run 3 times (${((threeGroups / oneGroup) * 100).toFixed(1)}%)`);
  await ours.close();
  await bull.close();
  const durabilityTable = await durability();

  const ratio = (x: number, y: number) => `${(x / y).toFixed(2)}×`;
  const rows: [string, string, string, string][] = [
    ['enqueue, single awaited emit / add (tasks/s)', a.enqueueSingle.toFixed(0), b.enqueueSingle.toFixed(0), ratio(a.enqueueSingle, b.enqueueSingle)],
    [`enqueue, emitBatch / addBulk of ${BATCH} (tasks/s)`, a.enqueueBatch.toFixed(0), b.enqueueBatch.toFixed(0), ratio(a.enqueueBatch, b.enqueueBatch)],
    ...[1, 16, 64].map((c): [string, string, string, string] => [
      `drain ${DRAIN_TASKS}, concurrency ${c} (tasks/s)`,
      a.drain[c].toFixed(0),
      b.drain[c].toFixed(0),
      ratio(a.drain[c], b.drain[c]),
    ]),
    ['enqueue → handler start p50 at 2,000/s (ms)', a.latencyP50.toFixed(2), b.latencyP50.toFixed(2), ratio(b.latencyP50, a.latencyP50) + ' lower'],
    ['enqueue → handler start p99 at 2,000/s (ms)', a.latencyP99.toFixed(2), b.latencyP99.toFixed(2), ratio(b.latencyP99, a.latencyP99) + ' lower'],
    ['Redis commands per task, end to end (Lua included)', a.cost.redisCommandsPerTask.toFixed(2), b.cost.redisCommandsPerTask.toFixed(2), ratio(b.cost.redisCommandsPerTask, a.cost.redisCommandsPerTask) + ' fewer'],
    ['client commands per task, enqueue included (≥ round trips), c=16', a.cost.clientCommandsPerTask.toFixed(2), b.cost.clientCommandsPerTask.toFixed(2), ratio(b.cost.clientCommandsPerTask, a.cost.clientCommandsPerTask) + ' fewer'],
    ['Redis CPU per task (µs)', a.cost.redisCpuMicrosPerTask.toFixed(1), b.cost.redisCpuMicrosPerTask.toFixed(1), ratio(b.cost.redisCpuMicrosPerTask, a.cost.redisCpuMicrosPerTask) + ' less'],
    ['Node CPU per task, producer + worker (µs)', a.cost.nodeCpuMicrosPerTask.toFixed(1), b.cost.nodeCpuMicrosPerTask.toFixed(1), ratio(b.cost.nodeCpuMicrosPerTask, a.cost.nodeCpuMicrosPerTask) + ' less'],
    ['bytes in Redis per pending task', a.bytesPerPending.toFixed(0), b.bytesPerPending.toFixed(0), ratio(b.bytesPerPending, a.bytesPerPending) + ' less'],
    ['keys (bytes) left after the drain', `${a.keysLeftAfterDrain} (${a.bytesLeftAfterDrain})`, `${b.keysLeftAfterDrain} (${b.bytesLeftAfterDrain})`, ''],
    [`fairness: other client's task start, ${FLOOD_TASKS} pending of one client`, formatMs(a.fairnessDelayMs), formatMs(b.fairnessDelayMs), ''],
    [
      'consumer groups: tasks/s with 1 vs 3 groups (each task run once per group)',
      `${oneGroup.toFixed(0)} vs ${threeGroups.toFixed(0)} (${((threeGroups / oneGroup) * 100).toFixed(1)}%; ${(threeGroups * 3).toFixed(0)} runs/s)`,
      'n/a (no fan-out)',
      '',
    ],
    ['scale: drain rate, 10 vs 10,000 active clients (tasks/s)', `${few.toFixed(0)} vs ${many.toFixed(0)} (${((many / few) * 100).toFixed(1)}%)`, 'n/a (no per-client lists)', ''],
  ];
  const table = [
    '| measure | nestjs-redis-tasks | BullMQ | ratio |',
    '|---|---:|---:|---:|',
    ...rows.map((row) => `| ${row.join(' | ')} |`),
  ].join('\n');
  // Read from node_modules: not every package exports its package.json.
  const version = (name: string) =>
    (JSON.parse(readFileSync(new URL(`../../node_modules/${name}/package.json`, import.meta.url), 'utf8')) as { version: string }).version;
  const versions = { node: process.version, redis: redisVersion, bullmq: version('bullmq'), ioredis: version('ioredis'), nest: version('@nestjs/microservices') };
  const machine = `${type()}, ${cpus().length} × ${cpus()[0]?.model ?? 'unknown CPU'}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB`;
  const header = [
    '# Benchmark results',
    '',
    `Produced by \`npm run bench\` on ${new Date().toISOString().slice(0, 10)}; both libraries in the same run, on the same Redis,`,
    'producer and worker in one process, no-op handler; BullMQ jobs with `removeOnComplete`.',
    `Throughput rows are the median of ${REPEATS} runs. "Client commands" counts every command the process sent`,
    '(producer included: each single enqueue is one), an upper bound of round trips.',
    '',
    `- Machine: ${machine}`,
    `- Versions: Node ${versions.node}, Redis ${versions.redis}, BullMQ ${versions.bullmq}, ioredis ${versions.ioredis}, @nestjs/microservices ${versions.nest}`,
    `- Redis: ${process.env.BENCH_REDIS_SOURCE ?? url}`,
    '',
  ].join('\n');
  const durabilitySection = [
    '## What durability costs',
    '',
    'Enqueue rates of nestjs-redis-tasks alone under each setting, each on its own redis-server on this machine',
    "(AOF files on the project's ext4 disk, not a tmpfs; replicas on loopback). See the README's \"Scaling out\".",
    '',
    durabilityTable,
  ].join('\n');
  log(`\n${table}\n\n${durabilityTable}`);
  if (process.env.BENCH_WRITE !== '0') {
    writeFileSync(new URL('../../bench/RESULTS.md', import.meta.url), `${header}\n${table}\n\n${durabilitySection}\n`);
    log('\nwritten to bench/RESULTS.md');
  }
  await redis.quit();
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
