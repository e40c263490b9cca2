import 'reflect-metadata';
import { readFileSync, writeFileSync } from 'node:fs';
import { cpus, totalmem, type } from 'node:os';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { BareHandoffDriver, BeeQueueDriver, NestRedisDriver } from './anchors.js';
import { BullMqDriver, OursDriver, type BenchTask, type Driver } from './drivers.js';
import { COALESCE_INTRO, coalesceRows } from './coalesce.js';
import { BATCH_INTRO, batchRows } from './batches.js';
import { FLOW_INTRO, flowRows } from './flows.js';
import { OUTBOX_INTRO, outboxRows } from './outbox.js';
import { STEP_INTRO, stepRows } from './steps.js';
import { anchorIdleRows, claimRows, claimTable, IDLE_INTRO, idleRows, idleTable } from './idle.js';
import { CONNECTIONS_INTRO, CONNECTIONS_LATENCY, connectionsTable } from './connections.js';
import { NODES_INTRO, nodesTable } from './nodes.js';
import { TABLE_READINGS } from './readings.js';
import { scheduleCost, scheduleLine } from './schedules.js';
import { crowdFigures, crowdLines } from './schedule-crowd.js';
import { recordBytes, recordLines } from './records.js';
import { HANDOFF_INTRO, handoffFigures, handoffSection } from './handoff.js';
import { dashboardLine, dashboardScale } from './dashboard.js';
import { durabilitySettings, measureDurability, type DurabilityFigures } from './durability.js';
import { LibraryProcess, serveLibrary, type LibraryKind, type LibraryOps } from './isolation.js';
import {
  bytesMatching,
  Completion,
  deleteMatching,
  measure,
  percentile,
  promotedDuring,
  roundSample,
  serverSnapshot,
  shownSample,
  sleep,
  type Cost,
  type RoundSample,
} from './measure.js';

const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const DRAIN_TASKS = Number(process.env.BENCH_DRAIN_TASKS ?? 20_000);
const SINGLE_TASKS = Number(process.env.BENCH_SINGLE_TASKS ?? 5_000);
const LATENCY_TASKS = Number(process.env.BENCH_LATENCY_TASKS ?? 6_000);
const FLOOD_TASKS = Number(process.env.BENCH_FLOOD_TASKS ?? 100_000);
const PARALLEL_TASKS = Number(process.env.BENCH_PARALLEL_TASKS ?? 20_000);
const SEND_TASKS = Number(process.env.BENCH_SEND_TASKS ?? 20_000);
const PROMOTION_TASKS = Number(process.env.BENCH_PROMOTION_TASKS ?? 40_000);
const BATCH = 1_000;
/** Throughput phases run this many times; the median is reported (a 2-core machine is noisy). */
const REPEATS = Number(process.env.BENCH_REPEATS ?? 3);
/** Latency rows take more rounds: a tail is the noisiest figure here (one run in three can be 5-10× the others). */
const LATENCY_REPEATS = Number(process.env.BENCH_LATENCY_REPEATS ?? Math.max(REPEATS, 5));

/** REPEATS runs of one measurement: their median and spread. */
async function samples(run: () => Promise<number>): Promise<Sample> {
  const results: number[] = [];
  for (let i = 0; i < REPEATS; i++) results.push(await run());
  return sampleOf(results);
}

/** A figure measured over several runs: the median, and the spread. */
type Sample = RoundSample;

interface Latency {
  readonly p50: Sample;
  readonly p99: Sample;
}

/** What one library measured; a figure it cannot produce (no batch call, no backlog) is absent. */
interface Figures {
  emitParallel: Sample;
  emitCpuMicros: Sample;
  /** Node CPU (the library's process) and Redis CPU per single awaited emit (µs). */
  emitNodeMicros: Sample;
  emitRedisMicros: Sample;
  emitSequential: Sample;
  /** Bare ioredis PINGs one at a time, in blocks taking turns with this library's single emits. */
  pingFloor?: Sample;
  /** Bare ioredis EVALSHA of an empty script, one at a time, taking turns alike. */
  scriptFloor?: Sample;
  /** This library's single emits over the PINGs of the same run (per run, then the median). */
  emitOverPing?: Sample;
  bytesPerEmit: Sample;
  /** Bytes scavenges promoted to the old generation per emit, at 10 emits per ms with no worker. */
  promotedPerEmit?: Sample;
  sendParallel?: Sample;
  enqueueBatch?: Sample;
  drain: Record<number, Sample>;
  latency: Record<number, Latency>;
  aofLatency: Record<number, Latency>;
  /** The bare RPUSH → BLPOP hand-off measured right after this library's latency rows. */
  latencyFloor?: Latency;
  aofLatencyFloor?: Latency;
  bytesPerPending?: Sample;
  keysLeftAfterDrain?: number;
  bytesLeftAfterDrain?: number;
  fairnessDelayMs?: Sample;
  /** What a task costs end to end, per run (see endToEnd). */
  costs?: { commands: Sample; redisCpu: Sample; nodeCpu: Sample };
  /** Tasks padded to about N bytes (PAYLOAD_SIZES): emits 64 in flight, and a queue's drain at concurrency 16. */
  payload?: Record<number, { emit: Sample; drain?: Sample }>;
  /** Latency at half this library's highest drain rate (its own rate), concurrency 64. */
  halfRate?: { perSecond: number; latency: Latency };
  /** Latency at one rate for every queue library (half the lowest of their highest drain rates), concurrency 64. */
  commonRate?: { perSecond: number; latency: Latency };
}

const redis = new Redis(url);
const done = new Completion();
/** Filler of every task made while a payload row runs (see payloadRun); none otherwise. */
let padding: string | undefined;
const task = (i: number): BenchTask =>
  padding === undefined ? { i, t: performance.now() } : { i, t: performance.now(), pad: padding };
const tasks = (n: number, from = 0): BenchTask[] => Array.from({ length: n }, (_, i) => task(from + i));
const log = (line: string) => console.log(line);
const LATENCY_CONCURRENCIES = (process.env.BENCH_LATENCY_CONCURRENCIES ?? '1,16,64').split(',').map(Number);

async function fill(driver: Driver, n: number, clientId?: string | ((index: number) => string)): Promise<void> {
  for (let start = 0; start < n; start += BATCH) {
    const size = Math.min(BATCH, n - start);
    const offset = start;
    await driver.enqueueBatch(
      tasks(size, start),
      typeof clientId === 'function' ? (i) => clientId(offset + i) : clientId,
    );
  }
}

/** Bytes every client sent to the server so far (the bench server serves only this process). */
async function bytesReceived(server: Redis): Promise<number> {
  return Number(/total_net_input_bytes:(\d+)/.exec(await server.info('stats'))?.[1] ?? Number.NaN);
}

/** What the single-emit rows measure in one library's process, the floors beside its emits. */
interface SequentialRun {
  /** Awaited emits, one at a time (tasks/s). */
  readonly rate: number;
  /** Bare ioredis PINGs, one at a time, in blocks taking turns with the emits' (round trips/s). */
  readonly ping: number;
  /** Bare ioredis EVALSHA of a script that writes nothing (`return 0`), taking turns alike (calls/s). */
  readonly script: number;
  readonly bytes: number;
  /** Node CPU (the library's whole process) and Redis CPU per emit, over the emit blocks alone (µs). */
  readonly nodeMicros: number;
  readonly redisMicros: number;
}

/** Emits, PINGs and empty script calls take turns in blocks of this many, so a stretch of noise hits all three. */
const SEQUENTIAL_BLOCK = 250;

/**
 * One awaited emit at a time (no worker running), beside the round trip's floors measured in the same
 * process, in blocks that take turns: a bare ioredis PING, and a bare ioredis EVALSHA of an empty script
 * (the least an atomic enqueue through ioredis and Lua can cost). Also the bytes sent to Redis per emit.
 */
async function emitSequential(driver: Driver): Promise<SequentialRun> {
  await driver.begin('single');
  const floor = new Redis(url);
  const sha = (await floor.script('LOAD', 'return 0')) as string;
  for (let i = 0; i < 200; i++) await floor.ping();
  const bytesBefore = await bytesReceived(redis);
  for (const task of tasks(2_000)) await driver.enqueue(task); // warm-up (JIT), not timed; its bytes are counted
  const bytes = ((await bytesReceived(redis)) - bytesBefore) / 2_000;
  const time = { emit: 0, ping: 0, script: 0 };
  const cpu = { node: 0, redis: 0 };
  for (let done = 0; done < SINGLE_TASKS; done += SEQUENTIAL_BLOCK) {
    const server = await serverSnapshot(redis);
    const node = process.cpuUsage();
    let start = performance.now();
    for (const task of tasks(SEQUENTIAL_BLOCK, done)) await driver.enqueue(task);
    time.emit += performance.now() - start;
    const used = process.cpuUsage(node);
    cpu.node += used.user + used.system;
    cpu.redis += (await serverSnapshot(redis)).cpuMicros - server.cpuMicros;
    start = performance.now();
    for (let i = 0; i < SEQUENTIAL_BLOCK; i++) await floor.ping();
    time.ping += performance.now() - start;
    start = performance.now();
    for (let i = 0; i < SEQUENTIAL_BLOCK; i++) await floor.evalsha(sha, 0);
    time.script += performance.now() - start;
  }
  floor.disconnect();
  await deleteMatching(redis, driver.keyPattern);
  const rate = (ms: number) => SINGLE_TASKS / (ms / 1000);
  return {
    rate: rate(time.emit),
    ping: rate(time.ping),
    script: rate(time.script),
    bytes,
    nodeMicros: cpu.node / SINGLE_TASKS,
    redisMicros: cpu.redis / SINGLE_TASKS,
  };
}

/** Runs `n` calls of `call`, `inFlight` of them awaited at all times. */
async function keepInFlight(n: number, inFlight: number, call: (task: BenchTask) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (next < n) {
        const i = next++;
        await call(task(i));
      }
    }),
  );
}

/**
 * Emits at a steady 10 per ms (no worker), as a producer under load does: the bytes per emit that
 * scavenges promoted to the old generation meanwhile (see promotedDuring).
 */
async function emitPromotion(driver: Driver): Promise<number> {
  await driver.begin('promotion');
  const emitAtRate = async (n: number): Promise<void> => {
    const start = performance.now();
    let sent = 0;
    let inFlight: Promise<void>[] = [];
    while (sent < n) {
      const due = Math.min(n, Math.floor((performance.now() - start) * 10));
      for (; sent < due; sent++) inFlight.push(driver.enqueue({ i: sent, t: performance.now() }));
      if (inFlight.length >= 1_000) {
        await Promise.all(inFlight);
        inFlight = [];
      }
      await sleep(1);
    }
    await Promise.all(inFlight);
  };
  await emitAtRate(5_000); // warm-up, not measured
  const promoted = await promotedDuring(() => emitAtRate(PROMOTION_TASKS));
  await deleteMatching(redis, driver.keyPattern);
  return promoted / PROMOTION_TASKS;
}

/** `inFlight` awaited emits at all times (no worker running): tasks/s and Node CPU per emit. */
async function emitParallel(
  driver: Driver,
  inFlight = 64,
  count = PARALLEL_TASKS,
): Promise<{ rate: number; cpuMicros: number }> {
  await driver.begin('par');
  const run = (n: number) => keepInFlight(n, inFlight, (task) => driver.enqueue(task));
  await run(2_000); // warm-up, not timed
  const cpuBefore = process.cpuUsage();
  const start = performance.now();
  await run(count);
  const seconds = (performance.now() - start) / 1000;
  const cpu = process.cpuUsage(cpuBefore);
  await deleteMatching(redis, driver.keyPattern);
  return { rate: count / seconds, cpuMicros: (cpu.user + cpu.system) / count };
}

/** send() request/reply, `inFlight` awaited at all times, a worker of concurrency 64 answering. */
async function sendParallel(driver: Driver, inFlight = 64): Promise<number> {
  const request = driver.request?.bind(driver);
  if (!request) return Number.NaN;
  await driver.begin('send');
  await driver.startWorker(64, () => undefined);
  const run = (n: number) => keepInFlight(n, inFlight, request);
  await run(1_000); // warm-up, not timed
  const start = performance.now();
  await run(SEND_TASKS);
  const rate = SEND_TASKS / ((performance.now() - start) / 1000);
  await driver.stopWorker();
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
async function drain(
  driver: Driver,
  concurrency: number,
  memory?: (pending: { bytes: number }) => void,
  clients?: (index: number) => string,
  count = DRAIN_TASKS,
): Promise<number> {
  await driver.begin(`drain${concurrency}`);
  await fill(driver, count, clients);
  if (memory) memory(await bytesMatching(redis, driver.keyPattern));
  done.reset();
  const start = performance.now();
  await driver.startWorker(concurrency, () => done.hit());
  await done.until(count);
  const rate = count / ((performance.now() - start) / 1000);
  await driver.stopWorker();
  return rate;
}

/** Tasks per run of the payload rows (16 KB each: 160 MB pending at once). */
const PAYLOAD_TASKS = Number(process.env.BENCH_PAYLOAD_TASKS ?? 10_000);

/**
 * The payload rows: tasks padded to about `bytes` bytes, emitted 64 awaited in flight (no worker), then
 * (a queue library) enqueued in batches and drained at concurrency 16; tasks/s of each.
 */
async function payloadRun(
  driver: Driver,
  bytes: number,
  withDrain: boolean,
): Promise<{ emit: number; drain?: number }> {
  padding = 'x'.repeat(bytes);
  try {
    const { rate: emit } = await emitParallel(driver, 64, PAYLOAD_TASKS);
    if (!withDrain) return { emit };
    const rate = await drain(driver, 16, undefined, undefined, PAYLOAD_TASKS);
    await deleteMatching(redis, driver.keyPattern);
    return { emit, drain: rate };
  } finally {
    padding = undefined;
  }
}

/** One drain run, and with `measureMemory`, the bytes per pending task and what the drain left. */
interface DrainRun {
  readonly rate: number;
  readonly bytesPerPending?: number;
  readonly keysLeft?: number;
  readonly bytesLeft?: number;
}

async function drainRun(driver: Driver, concurrency: number, measureMemory: boolean): Promise<DrainRun> {
  let bytesPerPending: number | undefined;
  const rate = await drain(
    driver,
    concurrency,
    measureMemory ? (pending) => (bytesPerPending = pending.bytes / DRAIN_TASKS) : undefined,
  );
  const left = measureMemory ? await bytesMatching(redis, driver.keyPattern) : undefined;
  await deleteMatching(redis, driver.keyPattern);
  return { rate, bytesPerPending, keysLeft: left?.keys, bytesLeft: left?.bytes };
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

/** Enqueue -> handler start at a steady rate (2,000 tasks/s), worker at `concurrency`. */
/** What the latency rows need of a queue (the bare hand-off floor has only this). */
type LatencyDriver = Pick<Driver, 'begin' | 'enqueue' | 'startWorker' | 'stopWorker' | 'keyPattern'>;

async function latency(
  driver: LatencyDriver,
  concurrency: number,
  server = redis,
  perMs = 2,
): Promise<{ p50: number; p99: number }> {
  await driver.begin(`latency${concurrency}`);
  const samples: number[] = [];
  done.reset();
  await driver.startWorker(concurrency, (task) => {
    samples.push(performance.now() - task.t);
    done.hit();
  });
  // A warm-up of one second at the rate, not timed (code compiled, pools at their working size); then 3 s timed.
  const warmup = Math.round(perMs * 1_000);
  const total = warmup + (perMs === 2 ? LATENCY_TASKS : Math.round(perMs * 3_000));
  const start = performance.now();
  const inFlight: Promise<void>[] = [];
  let sent = 0;
  while (sent < total) {
    const due = Math.floor((performance.now() - start) * perMs);
    while (sent < Math.min(due, total)) {
      inFlight.push(driver.enqueue({ i: sent, t: performance.now() }));
      sent++;
    }
    await sleep(1);
  }
  await Promise.all(inFlight);
  await done.until(total);
  await driver.stopWorker();
  await deleteMatching(server, driver.keyPattern);
  const sorted = samples.slice(warmup).sort((a, b) => a - b);
  return { p50: percentile(sorted, 50), p99: percentile(sorted, 99) };
}

/** Latency runs repeated; each percentile's median and spread over the runs. */
async function latencies(driver: LatencyDriver, concurrency: number, server = redis): Promise<Latency> {
  const runs: { p50: number; p99: number }[] = [];
  for (let i = 0; i < REPEATS; i++) runs.push(await latency(driver, concurrency, server));
  return latencyOf(runs);
}

function latencyOf(runs: readonly { p50: number; p99: number }[]): Latency {
  return { p50: sampleOf(runs.map((r) => r.p50)), p99: sampleOf(runs.map((r) => r.p99)) };
}

/**
 * `count` rounds, each running `once` for every driver in turn: the libraries take turns, so a stretch
 * of host noise (this 2-core VM has them: one run in three of a library gave 2-17 ms p99 where its
 * others gave 0.5) hits every library in a round alike, instead of whichever ran all its runs then.
 * Returns each driver's results, in round order.
 */
async function rounds<D, T>(
  drivers: readonly D[],
  once: (driver: D, index: number) => Promise<T>,
  count = REPEATS,
): Promise<T[][]> {
  const results = drivers.map((): T[] => []);
  for (let round = 0; round < count; round++) {
    for (const [d, driver] of drivers.entries()) results[d].push(await once(driver, d));
  }
  return results;
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

const spread = (s: Sample, digits = 0) => shownSample(s, digits);
const sampleOf = (values: number[]): Sample => roundSample(values);

/**
 * The producer-side rows, which every library (Nest's pub/sub transport included) can run. Rounds
 * interleave the libraries (each round runs every library once, then the next round), so drift on a
 * noisy machine hits all alike; a bare ioredis PING loop runs beside each as the round trip's floor.
 */
async function producerRows(libraries: readonly LibraryProcess[], all: Figures[]): Promise<void> {
  const runs = libraries.map(() => ({
    sequential: [] as number[],
    ping: [] as number[],
    script: [] as number[],
    ratio: [] as number[],
    bytes: [] as number[],
    node: [] as number[],
    server: [] as number[],
    parallel: [] as number[],
    cpu: [] as number[],
    send: [] as number[],
    promoted: [] as number[],
  }));
  // A round not timed first: each library's process is new, and its first runs measured its compiler
  // (ours: send() 27-32k/s in the first round, 38-42k in the next ones; Nest's: 19-20k, then 26-29k).
  for (const library of libraries) {
    await library.call('emitSequential', url);
    await library.call('emitParallel', url);
    await library.call('sendParallel', url);
  }
  for (let round = 0; round < REPEATS; round++) {
    for (const [d, library] of libraries.entries()) {
      const run = await library.call<SequentialRun>('emitSequential', url);
      runs[d].sequential.push(run.rate);
      runs[d].ping.push(run.ping);
      runs[d].script.push(run.script);
      runs[d].ratio.push(run.rate / run.ping);
      runs[d].bytes.push(run.bytes);
      runs[d].node.push(run.nodeMicros);
      runs[d].server.push(run.redisMicros);
    }
    for (const [d, library] of libraries.entries()) {
      const { rate, cpuMicros } = await library.call<{ rate: number; cpuMicros: number }>('emitParallel', url);
      runs[d].parallel.push(rate);
      runs[d].cpu.push(cpuMicros);
    }
    for (const [d, library] of libraries.entries()) {
      const rate = await library.call<number | undefined>('sendParallel', url);
      if (rate !== undefined) runs[d].send.push(rate);
    }
    for (const [d, library] of libraries.entries())
      runs[d].promoted.push(await library.call<number>('emitPromotion', url));
  }
  for (const [d, driver] of libraries.entries()) {
    const figures = all[d];
    figures.emitSequential = sampleOf(runs[d].sequential);
    figures.pingFloor = sampleOf(runs[d].ping);
    figures.scriptFloor = sampleOf(runs[d].script);
    figures.emitOverPing = sampleOf(runs[d].ratio);
    figures.bytesPerEmit = sampleOf(runs[d].bytes);
    figures.emitNodeMicros = sampleOf(runs[d].node);
    figures.emitRedisMicros = sampleOf(runs[d].server);
    figures.emitParallel = sampleOf(runs[d].parallel);
    figures.emitCpuMicros = sampleOf(runs[d].cpu);
    if (runs[d].send.length > 0) figures.sendParallel = sampleOf(runs[d].send);
    figures.promotedPerEmit = sampleOf(runs[d].promoted);
    log(`\n== ${driver.name}: producer side`);
    log(
      `emit, one awaited at a time: ${spread(figures.emitSequential)} tasks/s; ${spread(figures.bytesPerEmit)} bytes sent to Redis per emit`,
    );
    log(`floor: bare ioredis PING, one awaited at a time: ${spread(figures.pingFloor)} round trips/s`);
    log(`floor: bare ioredis EVALSHA of an empty script, one at a time: ${spread(figures.scriptFloor)} calls/s`);
    log(`emit / PING, same run: ${spread(figures.emitOverPing, 2)}`);
    log(
      `single emit: Node CPU ${spread(figures.emitNodeMicros, 1)} µs, Redis CPU ${spread(figures.emitRedisMicros, 1)} µs per emit`,
    );
    log(
      `emit, 64 awaited in flight: ${spread(figures.emitParallel)} tasks/s; Node CPU ${spread(figures.emitCpuMicros, 1)} µs per emit`,
    );
    if (figures.sendParallel) log(`send() request/reply, 64 in flight: ${spread(figures.sendParallel)} tasks/s`);
    log(`promoted to the old generation at 10 emits per ms: ${spread(figures.promotedPerEmit)} bytes per emit`);
  }
}

/**
 * The latency rows of several libraries on one server, interleaved by round (see rounds); at concurrency 1
 * the bare hand-off floor takes its turn in the same rounds. Each library's figures get its percentiles
 * per concurrency, and the floor (one figure for all: `floor`).
 */
async function latencyRows(
  entries: readonly { library: LibraryProcess; figures: Figures }[],
  at: { url: string; server: Redis; aof: boolean },
): Promise<void> {
  const floor = new BareHandoffDriver(at.url);
  if (at.aof) await warmAofServer(at.url, at.server);
  const title = at.aof ? 'same with AOF everysec' : 'enqueue -> handler start at 2,000 tasks/s';
  for (const concurrency of LATENCY_CONCURRENCIES) {
    // Each library in its own process; the floor (bare ioredis) here.
    const runners = entries.map(
      ({ library }) =>
        () =>
          library.call<{ p50: number; p99: number }>('latency', at.url, concurrency),
    );
    if (concurrency === 1) runners.push(() => latency(floor, concurrency, at.server)); // the floor's schedule is the concurrency-1 one
    const results = await rounds(runners, (run) => run(), LATENCY_REPEATS);
    entries.forEach(({ library: driver, figures }, d) => {
      const result = latencyOf(results[d]);
      (at.aof ? (figures.aofLatency ??= {}) : (figures.latency ??= {}))[concurrency] = result;
      log(
        `${driver.name}: ${title}, concurrency ${concurrency}: p50 ${spread(result.p50, 2)} ms, p99 ${spread(result.p99, 2)} ms`,
      );
    });
    if (results.length > entries.length) {
      const result = latencyOf(results[entries.length]);
      for (const { figures } of entries) {
        if (at.aof) figures.aofLatencyFloor = result;
        else figures.latencyFloor = result;
      }
      log(
        `floor: ${floor.name} hand-off, ${title}, concurrency ${concurrency}, same rounds: p50 ${spread(result.p50, 2)} ms, p99 ${spread(result.p99, 2)} ms`,
      );
    }
  }
  await floor.close();
}

/** Payload sizes of the payload rows (bytes of filler per task). */
const PAYLOAD_SIZES = [1_024, 16_384];

/** The payload rows of every library (the queues drain too), libraries taking turns in each round. */
async function payloadRows(
  entries: readonly { library: LibraryProcess; figures: Figures; queue: boolean }[],
): Promise<void> {
  for (const bytes of PAYLOAD_SIZES) {
    await rounds(entries, ({ library, queue }) => library.call('payload', url, bytes, queue), 1); // not timed (compiling)
    const runs = await rounds(entries, ({ library, queue }) =>
      library.call<{ emit: number; drain?: number }>('payload', url, bytes, queue),
    );
    entries.forEach(({ library, figures }, d) => {
      const drains = runs[d].flatMap((run) => (run.drain === undefined ? [] : [run.drain]));
      const row = {
        emit: sampleOf(runs[d].map((run) => run.emit)),
        drain: drains.length ? sampleOf(drains) : undefined,
      };
      (figures.payload ??= {})[bytes] = row;
      log(
        `${library.name}: ${bytes}-byte payloads: emit, 64 in flight ${spread(row.emit)} tasks/s` +
          (row.drain ? `; drain ${PAYLOAD_TASKS} at concurrency 16 ${spread(row.drain)} tasks/s` : ''),
      );
    });
  }
}

/**
 * Latency at half of each queue library's highest drain rate in this run (its own rate: what a queue
 * running at half its capacity sees), concurrency 64, libraries taking turns.
 */
async function halfRateLatencyRows(entries: readonly { library: LibraryProcess; figures: Figures }[]): Promise<void> {
  const rates = entries.map(({ figures }) => Math.max(...Object.values(figures.drain).map((s) => s.median)) / 2);
  const common = Math.min(...rates);
  const runs = await rounds(entries, ({ library }, d) =>
    library.call<{ p50: number; p99: number }>('latency', url, 64, rates[d] / 1000),
  );
  const commonRuns = await rounds(entries, ({ library }) =>
    library.call<{ p50: number; p99: number }>('latency', url, 64, common / 1000),
  );
  entries.forEach(({ library, figures }, d) => {
    figures.halfRate = { perSecond: rates[d], latency: latencyOf(runs[d]) };
    figures.commonRate = { perSecond: common, latency: latencyOf(commonRuns[d]) };
    for (const [
      what,
      {
        perSecond,
        latency: { p50, p99 },
      },
    ] of [
      ['half its highest drain rate', figures.halfRate],
      ["half the lowest queue's highest drain rate, for all", figures.commonRate],
    ] as const) {
      log(
        `${library.name}: enqueue -> handler start at ${perSecond.toFixed(0)} tasks/s (${what}), concurrency 64: p50 ${spread(p50, 2)} ms, p99 ${spread(p99, 2)} ms`,
      );
    }
  });
}

const warmedAofServers = new WeakSet<Redis>();

/**
 * A fresh AOF server gives whichever library runs on it first a far longer tail (the first seconds of
 * its file on disk: measured 12–16 ms p99 at concurrency 1 for the first library, Bee-Queue or ours,
 * 1.4–2.3 ms for the next, in either order). So before the first timed row on it, the bare hand-off
 * runs its latency schedule there once, untimed.
 */
async function warmAofServer(at: string, server: Redis): Promise<void> {
  if (warmedAofServers.has(server)) return;
  warmedAofServers.add(server);
  const warmer = new BareHandoffDriver(at);
  await latencies(warmer, 1, server);
  await warmer.close();
}

/** Batch enqueue and the drains of every queue library, interleaved by round (see rounds). */
async function throughputRows(entries: readonly { library: LibraryProcess; figures: Figures }[]): Promise<void> {
  const libraries = entries.map((entry) => entry.library);
  // A round not timed first, as for the producer rows: a library's first drains measured its compiler
  // (ours at concurrency 64: 81k, 105k, 125k, then 165-175k tasks/s in its first runs of one process).
  for (const library of libraries) {
    await library.call('enqueueBatch', url);
    for (const concurrency of [1, 64]) await library.call('drain', url, concurrency, false);
  }
  const batch = await rounds(libraries, (library) => library.call<number>('enqueueBatch', url));
  entries.forEach(({ library: driver, figures }, d) => {
    figures.enqueueBatch = sampleOf(batch[d]);
    log(`${driver.name}: enqueue, batches of ${BATCH}: ${spread(figures.enqueueBatch)} tasks/s`);
  });
  const pendingBytes = entries.map((): number[] => []);
  for (const concurrency of [1, 16, 64]) {
    const rates = await rounds(libraries, async (library, d) => {
      const figures = entries[d].figures;
      const run = await library.call<DrainRun>('drain', url, concurrency, concurrency === 16);
      if (concurrency === 16) {
        if (run.bytesPerPending !== undefined) pendingBytes[d].push(run.bytesPerPending);
        figures.bytesPerPending = sampleOf(pendingBytes[d]);
        figures.keysLeftAfterDrain = run.keysLeft;
        figures.bytesLeftAfterDrain = run.bytesLeft;
      }
      return run.rate;
    });
    entries.forEach(({ library: driver, figures }, d) => {
      (figures.drain ??= {})[concurrency] = sampleOf(rates[d]);
      log(
        `${driver.name}: drain ${DRAIN_TASKS} at concurrency ${concurrency}: ${spread(figures.drain[concurrency])} tasks/s`,
      );
      if (concurrency === 16) {
        log(
          `${driver.name}: memory: ${figures.bytesPerPending ? spread(figures.bytesPerPending) : 'n/a'} bytes per pending task; after the drain ${figures.keysLeftAfterDrain} keys (${figures.bytesLeftAfterDrain} bytes) left`,
        );
      }
    });
  }
}

/** What a task costs end to end, and fairness, for each queue library: libraries taking turns in each round. */
async function costRows(entries: readonly { library: LibraryProcess; figures: Figures }[]): Promise<void> {
  const costs = await rounds(entries, ({ library }) => library.call<Cost>('endToEnd', url));
  const delays = await rounds(entries, ({ library }) => library.call<number>('fairness', url));
  entries.forEach(({ library, figures }, d) => {
    const of = (pick: (cost: Cost) => number) => sampleOf(costs[d].map(pick));
    figures.costs = {
      commands: of((c) => c.redisCommandsPerTask),
      redisCpu: of((c) => c.redisCpuMicrosPerTask),
      nodeCpu: of((c) => c.nodeCpuMicrosPerTask),
    };
    figures.fairnessDelayMs = sampleOf(delays[d]);
    const { commands, redisCpu, nodeCpu } = figures.costs;
    log(`\n== ${library.name}`);
    log(
      `end to end (c=16): ${of((c) => c.tasks / c.seconds).median.toFixed(0)} tasks/s; per task ${spread(commands, 2)} Redis commands (Lua included), ` +
        `Redis CPU ${spread(redisCpu, 1)} µs, Node CPU ${spread(nodeCpu, 1)} µs`,
    );
    log(
      `fairness: another client's task started ${formatDelay(figures.fairnessDelayMs)} after its enqueue, behind ${FLOOD_TASKS} pending of one client`,
    );
  });
}

/** Median drain rates with 10 and with 10,000 clients, runs interleaved so drift hits both alike. */
async function scale(driver: OursDriver): Promise<[Sample, Sample]> {
  const few: number[] = [];
  const many: number[] = [];
  for (let i = 0; i < REPEATS; i++) {
    few.push(await drain(driver, 16, undefined, (index) => `client-${index % 10}`));
    await deleteMatching(redis, driver.keyPattern);
    many.push(await drain(driver, 16, undefined, (index) => `client-${index % 10_000}`));
    await deleteMatching(redis, driver.keyPattern);
  }
  return [sampleOf(few), sampleOf(many)];
}

type Cell = Sample | number | undefined;

interface Row {
  readonly label: string;
  readonly get: (figures: Figures) => Cell;
  /** Whether more is better (rates) or less (times, bytes, CPU, commands). */
  readonly better: 'higher' | 'lower';
  readonly digits?: number;
  /** One figure for every library (a floor measured in the same rounds): shown once, no ratio. */
  readonly shared?: boolean;
  /** Each library's figure measured at a rate of its own: no ratio (it would compare different loads). */
  readonly noRatio?: boolean;
}

/** The side-by-side table: ours, the three anchors, then ours against each anchor. */
function comparisonTable(all: Figures[], few: Sample, many: Sample, oneGroup: Sample, threeGroups: Sample): string {
  const [ours] = all;
  const commonRate = (all.find((f) => f.commonRate)?.commonRate?.perSecond ?? Number.NaN).toFixed(0);
  const median = (cell: Cell) => (typeof cell === 'number' ? cell : cell?.median);
  const show = (cell: Cell, digits: number) =>
    cell === undefined || Number.isNaN(median(cell))
      ? 'n/a'
      : typeof cell === 'number'
        ? cell.toFixed(digits)
        : spread(cell, digits);
  const ratio = (row: Row, anchor: Figures) => {
    const x = median(row.get(ours));
    const y = median(row.get(anchor));
    if (x === undefined || y === undefined || Number.isNaN(x) || Number.isNaN(y) || x === 0) return '';
    return `${(row.better === 'higher' ? x / y : y / x).toFixed(2)}×`;
  };
  const latencyRows = (
    name: string,
    pick: (f: Figures) => Record<number, Latency> | undefined,
    floor: (f: Figures) => Latency | undefined,
  ): Row[] => [
    ...LATENCY_CONCURRENCIES.flatMap((c): Row[] => [
      { label: `${name}, concurrency ${c}: p50 (ms)`, get: (f) => pick(f)?.[c]?.p50, better: 'lower', digits: 2 },
      { label: `${name}, concurrency ${c}: p99 (ms)`, get: (f) => pick(f)?.[c]?.p99, better: 'lower', digits: 2 },
    ]),
    {
      label:
        'floor: bare ioredis RPUSH → BLPOP hand-off, same schedule, concurrency 1, taking its turn in the same rounds: p50 (ms)',
      get: (f) => floor(f)?.p50,
      better: 'lower',
      digits: 2,
      shared: true,
    },
    {
      label:
        'floor: bare ioredis RPUSH → BLPOP hand-off, same schedule, concurrency 1, taking its turn in the same rounds: p99 (ms)',
      get: (f) => floor(f)?.p99,
      better: 'lower',
      digits: 2,
      shared: true,
    },
  ];
  const rows: Row[] = [
    { label: 'emit, 64 awaited in flight (tasks/s)', get: (f) => f.emitParallel, better: 'higher' },
    { label: 'emit, one awaited at a time (tasks/s)', get: (f) => f.emitSequential, better: 'higher' },
    {
      label: 'floor: bare ioredis PING, one awaited at a time, taking turns with its emits (round trips/s)',
      get: (f) => f.pingFloor,
      better: 'higher',
    },
    {
      label: 'floor: bare ioredis EVALSHA of an empty script, one at a time, taking turns alike (calls/s)',
      get: (f) => f.scriptFloor,
      better: 'higher',
    },
    {
      label: 'single emit / PING of the same run',
      get: (f) => f.emitOverPing,
      better: 'higher',
      digits: 2,
    },
    {
      label: "Node CPU per single awaited emit, the library's whole process (µs)",
      get: (f) => f.emitNodeMicros,
      better: 'lower',
      digits: 1,
    },
    {
      label: 'Redis CPU per single awaited emit (µs)',
      get: (f) => f.emitRedisMicros,
      better: 'lower',
      digits: 1,
    },
    { label: 'send() request/reply, 64 in flight (tasks/s)', get: (f) => f.sendParallel, better: 'higher' },
    { label: 'Node CPU per emit, 64 in flight (µs)', get: (f) => f.emitCpuMicros, better: 'lower', digits: 1 },
    { label: 'bytes sent to Redis per single emit', get: (f) => f.bytesPerEmit, better: 'lower' },
    {
      label: 'bytes promoted to the old generation per emit, 10 emits per ms, no worker',
      get: (f) => f.promotedPerEmit,
      better: 'lower',
    },
    {
      label: `enqueue, emitBatch / addBulk / saveAll of ${BATCH} (tasks/s)`,
      get: (f) => f.enqueueBatch,
      better: 'higher',
    },
    ...[1, 16, 64].map((c): Row => ({
      label: `drain ${DRAIN_TASKS}, concurrency ${c} (tasks/s)`,
      get: (f) => f.drain[c],
      better: 'higher',
    })),
    ...PAYLOAD_SIZES.flatMap((bytes): Row[] => [
      {
        label: `emit, 64 awaited in flight, payload ${bytes / 1024} KB (tasks/s)`,
        get: (f) => f.payload?.[bytes]?.emit,
        better: 'higher',
      },
      {
        label: `drain ${PAYLOAD_TASKS}, concurrency 16, payload ${bytes / 1024} KB (tasks/s)`,
        get: (f) => f.payload?.[bytes]?.drain,
        better: 'higher',
      },
    ]),
    {
      label: "half the library's highest drain rate above: the rate of the next two rows (tasks/s)",
      get: (f) => f.halfRate?.perSecond,
      better: 'higher',
    },
    {
      label: 'enqueue → handler start at that rate (its own), concurrency 64: p50 (ms)',
      get: (f) => f.halfRate?.latency.p50,
      better: 'lower',
      digits: 2,
      noRatio: true,
    },
    {
      label: 'enqueue → handler start at that rate (its own), concurrency 64: p99 (ms)',
      get: (f) => f.halfRate?.latency.p99,
      better: 'lower',
      digits: 2,
      noRatio: true,
    },
    {
      label: `enqueue → handler start at one rate for all (half the lowest highest drain rate: ${commonRate}/s), concurrency 64: p50 (ms)`,
      get: (f) => f.commonRate?.latency.p50,
      better: 'lower',
      digits: 2,
    },
    {
      label: `enqueue → handler start at one rate for all (half the lowest highest drain rate: ${commonRate}/s), concurrency 64: p99 (ms)`,
      get: (f) => f.commonRate?.latency.p99,
      better: 'lower',
      digits: 2,
    },
    ...latencyRows(
      'enqueue → handler start at 2,000/s',
      (f) => f.latency,
      (f) => f.latencyFloor,
    ),
    ...latencyRows(
      'same, AOF everysec',
      (f) => f.aofLatency,
      (f) => f.aofLatencyFloor,
    ),
    {
      label: 'Redis commands per task, end to end (Lua included)',
      get: (f) => f.costs?.commands,
      better: 'lower',
      digits: 2,
    },
    {
      label: 'Redis CPU per task, end to end (µs)',
      get: (f) => f.costs?.redisCpu,
      better: 'lower',
      digits: 1,
    },
    {
      label: 'Node CPU per task, producer + worker (µs)',
      get: (f) => f.costs?.nodeCpu,
      better: 'lower',
      digits: 1,
    },
    { label: 'bytes in Redis per pending task', get: (f) => f.bytesPerPending, better: 'lower' },
  ];
  const anchors = all.slice(1);
  const lines = rows.map((row) =>
    row.shared
      ? [row.label, show(row.get(ours), row.digits ?? 0), ...anchors.map(() => ''), ...anchors.map(() => '')]
      : [
          row.label,
          ...all.map((f) => show(row.get(f), row.digits ?? 0)),
          ...anchors.map((f) => (row.noRatio ? '' : ratio(row, f))),
        ],
  );
  const keysLeft = (f: Figures) =>
    f.keysLeftAfterDrain === undefined ? 'n/a' : `${f.keysLeftAfterDrain} (${f.bytesLeftAfterDrain})`;
  const fair = (f: Figures) => (f.fairnessDelayMs === undefined ? 'n/a' : formatDelay(f.fairnessDelayMs));
  lines.push(['keys (bytes) left after the drain', ...all.map(keysLeft), '', '', '']);
  lines.push([
    `fairness: other client's task start, ${FLOOD_TASKS} pending of one client`,
    ...all.map(fair),
    '',
    '',
    '',
  ]);
  lines.push([
    'consumer groups: tasks/s with 1 vs 3 groups (each task run once per group)',
    `${spread(oneGroup)} vs ${spread(threeGroups)} (${((threeGroups.median / oneGroup.median) * 100).toFixed(1)}%; ${(threeGroups.median * 3).toFixed(0)} runs/s)`,
    'n/a (no fan-out)',
    'n/a',
    'n/a',
    '',
    '',
    '',
  ]);
  lines.push([
    'scale: drain rate, 10 vs 10,000 active clients (tasks/s)',
    `${spread(few)} vs ${spread(many)} (${((many.median / few.median) * 100).toFixed(1)}%)`,
    'n/a (no per-client lists)',
    'n/a',
    'n/a',
    '',
    '',
    '',
  ]);
  return [
    '| measure | nestjs-redis-tasks | BullMQ | Bee-Queue | Nest Transport.REDIS | vs BullMQ | vs Bee-Queue | vs Nest REDIS |',
    '|---|---:|---:|---:|---:|---:|---:|---:|',
    ...lines.map((line) => `| ${line.join(' | ')} |`),
  ].join('\n');
}

/** A delay's median and spread in ms; a run whose task never started (Infinity) shows as such. */
function formatDelay(delay: Sample): string {
  if (!Number.isFinite(delay.median)) return '> 120 s (not started)';
  return Number.isFinite(delay.max)
    ? `${spread(delay, 1)} ms`
    : `${spread({ ...delay, max: delay.median }, 1)} ms, one run > 120 s`;
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

/** One round of the tracking rows for one driver: awaited single emits, emitBatch, drain; and Redis's cost per task. */
async function trackingRound(
  driver: OursDriver,
): Promise<{ single: number; batch: number; drain: number; micros: number; commands: number }> {
  await driver.begin('track');
  let start = performance.now();
  for (let i = 0; i < SINGLE_TASKS; i++) await driver.enqueue({ i, t: 0 });
  const single = SINGLE_TASKS / ((performance.now() - start) / 1000);
  await deleteMatching(redis, driver.keyPattern);
  const before = await serverSnapshot(redis);
  start = performance.now();
  await fill(driver, DRAIN_TASKS);
  const batch = DRAIN_TASKS / ((performance.now() - start) / 1000);
  done.reset();
  start = performance.now();
  await driver.startWorker(16, () => done.hit());
  await done.until(DRAIN_TASKS);
  const drain = DRAIN_TASKS / ((performance.now() - start) / 1000);
  await driver.stopWorker();
  const after = await serverSnapshot(redis);
  await deleteMatching(redis, driver.keyPattern);
  return {
    single,
    batch,
    drain,
    micros: (after.cpuMicros - before.cpuMicros) / DRAIN_TASKS,
    commands: (after.commands - before.commands) / DRAIN_TASKS,
  };
}

/** What bench/RESULTS.md says above the tracking rows. */
const TRACKING_INTRO = [
  '## What tracking costs',
  '',
  'nestjs-redis-tasks alone, every task tracked (`track: true`: an index per task, see the README\'s "One task in',
  'hand") against none, rounds taking turns. Redis CPU and commands (Lua\'s own counted) per task cover the batch',
  'enqueue and the drain.',
];

/** Tracking on against off (the same library, rounds taking turns): what a task's index costs. */
async function trackingRows(): Promise<string> {
  log('\n== tracking (nestjs-redis-tasks): every task tracked against none, rounds taking turns');
  const drivers = [new OursDriver(url), new OursDriver(url, {}, true)];
  for (const driver of drivers) await trackingRound(driver); // warm-up (JIT), not reported
  const rounds: Awaited<ReturnType<typeof trackingRound>>[][] = [[], []];
  for (let round = 0; round < REPEATS; round++) {
    for (const [i, driver] of drivers.entries()) rounds[i].push(await trackingRound(driver));
  }
  for (const driver of drivers) await driver.close();
  const sample = (i: number, field: 'single' | 'batch' | 'drain' | 'micros' | 'commands'): Sample => {
    const values = rounds[i].map((round) => round[field]).sort((a, b) => a - b);
    return { median: values[Math.floor(values.length / 2)], min: values[0], max: values[values.length - 1] };
  };
  const shown = (s: Sample, digits = 0) =>
    `${s.median.toFixed(digits)} (${s.min.toFixed(digits)}–${s.max.toFixed(digits)})`;
  const rows = (['single', 'batch', 'drain', 'micros', 'commands'] as const).map((field) => {
    const [off, on] = [sample(0, field), sample(1, field)];
    const name = {
      single: 'single awaited emit (tasks/s)',
      batch: 'emitBatch of 1,000 (tasks/s)',
      drain: `drain ${DRAIN_TASKS.toLocaleString('en-US')} at concurrency 16 (tasks/s)`,
      micros: 'Redis CPU per task, batch enqueue + drain (µs)',
      commands: "Redis commands per task, batch enqueue + drain (Lua's own counted)",
    }[field];
    const digits = field === 'micros' || field === 'commands' ? 1 : 0;
    return `| ${name} | ${shown(off, digits)} | ${shown(on, digits)} | ${(on.median / off.median).toFixed(2)}× |`;
  });
  const table = ['| row | tracking off | tracking on | on / off |', '|---|---:|---:|---:|', ...rows].join('\n');
  log(table);
  return table;
}

/** Batches against plain tasks (see bench/batches.ts). */
async function batchTable(): Promise<string> {
  log('\n== batches (nestjs-redis-tasks): per task, against plain tasks, rounds taking turns');
  const driver = new OursDriver(url, { reaperIntervalMs: 100 });
  const table = await batchRows(driver, redis, REPEATS);
  await driver.close();
  log(table);
  return table;
}

/** Flows against plain tasks and BullMQ's FlowProducer (see bench/flows.ts). */
async function flowTable(): Promise<string> {
  log("\n== flows: per node, against plain tasks and BullMQ's FlowProducer, rounds taking turns");
  const driver = new OursDriver(url);
  const table = await flowRows(driver, url, redis, REPEATS);
  await driver.close();
  log(table);
  return table;
}

/** Durable steps against plain tasks and BullMQ's step pattern (see bench/steps.ts). */
async function stepTable(): Promise<string> {
  log(
    "\n== durable steps: per task and per step, against plain tasks and BullMQ's job.updateData(), rounds taking turns",
  );
  const table = await stepRows(url, redis, REPEATS);
  log(table);
  return table;
}

/** The transactional outbox on PostgreSQL and MariaDB (see bench/outbox.ts). */
async function outboxTable(): Promise<string> {
  log('\n== the transactional outbox: emits in a transaction, commit → handler start, relay throughput');
  const table = await outboxRows(url, redis, REPEATS);
  log(table);
  return table;
}

/** Coalescing keys against plain emits (see bench/coalesce.ts). */
async function coalesceTable(): Promise<string> {
  log('\n== coalescing keys (nestjs-redis-tasks): per emit, against plain emits, rounds taking turns');
  const driver = new OursDriver(url);
  const table = await coalesceRows(driver, redis, REPEATS);
  await driver.close();
  log(table);
  return table;
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
  const figures = settings.map((setting, i) => ({
    name: setting.name,
    single: sampleOf(rounds.map((round) => round[i].single)),
    batch: sampleOf(rounds.map((round) => round[i].batch)),
  }));
  for (const result of figures) {
    log(
      `${result.name}: single awaited emit ${spread(result.single)} tasks/s, emitBatch of 1,000 ${spread(result.batch)} tasks/s`,
    );
  }
  const base = figures[0];
  const share = (x: Sample, of: Sample) => `${((x.median / of.median) * 100).toFixed(0)}%`;
  return [
    '| setting | single awaited emit (tasks/s) | vs. none | emitBatch of 1,000 (tasks/s) | vs. none |',
    '|---|---:|---:|---:|---:|',
    ...figures.map(
      (f) =>
        `| ${f.name} | ${spread(f.single)} | ${share(f.single, base.single)} | ${spread(f.batch)} | ${share(f.batch, base.batch)} |`,
    ),
  ].join('\n');
}

/** The per-node section, on the Cluster scripts/bench.mjs started (BENCH_CLUSTER_PORTS), or why it is missing. */
async function nodesSection(): Promise<string> {
  const ports = (process.env.BENCH_CLUSTER_PORTS ?? '').split(',').filter(Boolean).map(Number);
  const table = ports.length > 0 ? await nodesTable(ports) : '(not measured: no redis-server to start a Cluster with)';
  return [...NODES_INTRO, '', table].join('\n');
}

/** The library a bench process of its own runs (see isolation.ts), on the Redis at `at`. */
function newDriver(kind: LibraryKind, at: string): Driver {
  switch (kind) {
    case 'ours':
      return new OursDriver(at);
    case 'bull':
      return new BullMqDriver(at);
    case 'bee':
      return new BeeQueueDriver(at);
    case 'nest':
      return new NestRedisDriver(at);
  }
}

const LIBRARY_NAMES: Record<LibraryKind, string> = {
  ours: 'nestjs-redis-tasks',
  bull: 'BullMQ',
  bee: 'Bee-Queue',
  nest: 'Nest Transport.REDIS',
};

/** In a library's own process: the measurements the parent asks for, each on that library's driver for a Redis URL. */
function libraryOps(kind: LibraryKind): LibraryOps {
  const drivers = new Map<string, Driver>();
  const servers = new Map<string, Redis>([[url, redis]]);
  const driverAt = (at: string): Driver => {
    let driver = drivers.get(at);
    if (!driver) {
      driver = newDriver(kind, at);
      drivers.set(at, driver);
    }
    return driver;
  };
  const serverAt = (at: string): Redis => {
    let server = servers.get(at);
    if (!server) {
      server = new Redis(at);
      servers.set(at, server);
    }
    return server;
  };
  return {
    emitSequential: (at: string) => emitSequential(driverAt(at)),
    emitParallel: (at: string) => emitParallel(driverAt(at)),
    sendParallel: async (at: string) => {
      const driver = driverAt(at);
      return driver.request ? sendParallel(driver) : undefined;
    },
    emitPromotion: (at: string) => emitPromotion(driverAt(at)),
    enqueueBatch: (at: string) => enqueueBatch(driverAt(at)),
    drain: (at: string, concurrency: number, measureMemory: boolean) =>
      drainRun(driverAt(at), concurrency, measureMemory),
    latency: (at: string, concurrency: number, perMs?: number) =>
      latency(driverAt(at), concurrency, serverAt(at), perMs),
    payload: (at: string, bytes: number, withDrain: boolean) => payloadRun(driverAt(at), bytes, withDrain),
    endToEnd: (at: string) => endToEnd(driverAt(at)),
    fairness: (at: string) => fairness(driverAt(at)),
    close: async () => {
      for (const driver of drivers.values()) await driver.close();
      for (const server of servers.values()) await server.quit();
      setImmediate(() => process.exit(0));
    },
  };
}

/** Starts each library's own process (see isolation.ts). */
function startLibraries(kinds: readonly LibraryKind[]): LibraryProcess[] {
  const script = fileURLToPath(import.meta.url);
  return kinds.map((kind) => new LibraryProcess(kind, LIBRARY_NAMES[kind], script));
}

/** The libraries of a partial run (BENCH_ONLY): BENCH_DRIVERS (e.g. `ours,bee`), else `all`. */
function onlyLibraries(all: readonly LibraryKind[]): LibraryProcess[] {
  return startLibraries(process.env.BENCH_DRIVERS ? (process.env.BENCH_DRIVERS.split(',') as LibraryKind[]) : all);
}

async function closeLibraries(libraries: readonly LibraryProcess[]): Promise<void> {
  await Promise.all(libraries.map((library) => library.close()));
}

async function main(): Promise<void> {
  if (process.env.BENCH_ONLY === 'groups') {
    const driver = new OursDriver(url);
    const one = (await samples(() => groupsDrain(driver, 1))).median;
    const three = (await samples(() => groupsDrain(driver, 3))).median;
    log(
      `1 group: ${one.toFixed(0)} tasks/s; 3 groups: ${three.toFixed(0)} tasks/s (${((three / one) * 100).toFixed(1)}%)`,
    );
    await driver.close();
    await redis.quit();
    return;
  }
  if (process.env.BENCH_ONLY === 'dashboard') {
    log(dashboardLine(await dashboardScale(url)));
    await redis.quit();
    return;
  }
  if (process.env.BENCH_ONLY === 'handoff') {
    log(`\n${handoffSection(await handoffFigures(url))}`);
    await redis.quit();
    return;
  }
  if (process.env.BENCH_ONLY === 'records') {
    log(recordLines(await recordBytes(url)));
    await redis.quit();
    return;
  }
  if (process.env.BENCH_ONLY === 'schedules') {
    log(scheduleLine(await scheduleCost(url)));
    log(crowdLines(await crowdFigures(url)));
    await redis.quit();
    return;
  }
  if (process.env.BENCH_ONLY === 'tracking') {
    await trackingRows();
    await redis.quit();
    return;
  }
  if (process.env.BENCH_ONLY === 'outbox') {
    log(`\n${await outboxTable()}`);
    await redis.quit();
    return;
  }
  if (process.env.BENCH_ONLY === 'steps') {
    log(`\n${await stepTable()}`);
    await redis.quit();
    return;
  }
  if (process.env.BENCH_ONLY === 'flows') {
    log(`\n${await flowTable()}`);
    await redis.quit();
    return;
  }
  if (process.env.BENCH_ONLY === 'batches') {
    log(`\n${await batchTable()}`);
    await redis.quit();
    return;
  }
  if (process.env.BENCH_ONLY === 'idle-anchors') {
    log(`\n${idleTable(await anchorIdleRows(url))}`);
    await redis.quit();
    return;
  }
  if (process.env.BENCH_ONLY === 'claims') {
    // The claim rows alone: tasks sent one at a time to 1, 8 and 20 idle processes.
    log(`\n${claimTable(await claimRows(url))}`);
    await redis.quit();
    return;
  }
  if (process.env.BENCH_ONLY === 'idle') {
    log(`\n${claimTable(await claimRows(url))}`);
    log(`\n${idleTable([...(await idleRows(url)), ...(await anchorIdleRows(url))])}`);
    await redis.quit();
    return;
  }
  if (process.env.BENCH_ONLY === 'connections') {
    log(`\n${await connectionsTable(url)}`);
    await redis.quit();
    return;
  }
  if (process.env.BENCH_ONLY === 'nodes') {
    log(`\n${await nodesSection()}`);
    await redis.quit();
    return;
  }
  if (process.env.BENCH_ONLY === 'coalesce') {
    log(`\n${await coalesceTable()}`);
    await redis.quit();
    return;
  }
  if (process.env.BENCH_ONLY === 'durability') {
    log(`\n${await durability()}`);
    await redis.quit();
    return;
  }
  if (process.env.BENCH_ONLY === 'producer') {
    // The producer rows alone, for every library (quick to iterate on the producer path).
    const libraries = onlyLibraries(['ours', 'bull', 'bee', 'nest']);
    await producerRows(
      libraries,
      libraries.map(() => ({}) as Figures),
    );
    await closeLibraries(libraries);
    await redis.quit();
    return;
  }
  if (process.env.BENCH_ONLY === 'drain') {
    // The batch and drain rows alone, for every queue library (quick to iterate on the worker path).
    const libraries = onlyLibraries(['ours', 'bull', 'bee']);
    await throughputRows(libraries.map((library) => ({ library, figures: {} as Figures })));
    await closeLibraries(libraries);
    await redis.quit();
    return;
  }
  if (process.env.BENCH_ONLY === 'payloads') {
    // The payload rows and the latency at half the highest drain rate (which needs the drain rows first).
    const libraries = onlyLibraries(['ours', 'bull', 'bee', 'nest']);
    const entries = libraries.map((library) => ({ library, figures: {} as Figures, queue: library.kind !== 'nest' }));
    await payloadRows(entries);
    const queues = entries.filter((entry) => entry.queue);
    await throughputRows(queues);
    await halfRateLatencyRows(queues);
    await closeLibraries(libraries);
    await redis.quit();
    return;
  }
  if (process.env.BENCH_ONLY === 'cost') {
    // What a task costs end to end (Redis commands, Redis and Node CPU per task), alone: for refactors of the hot path.
    const libraries = onlyLibraries(['ours', 'bull', 'bee']);
    await costRows(libraries.map((library) => ({ library, figures: {} as Figures })));
    await closeLibraries(libraries);
    await redis.quit();
    return;
  }
  if (process.env.BENCH_ONLY === 'latency') {
    const aofUrl = process.env.BENCH_AOF_EVERYSEC_URL;
    const aofServer = aofUrl ? new Redis(aofUrl) : undefined;
    const libraries = onlyLibraries(['ours', 'bull', 'bee']);
    await latencyRows(
      libraries.map((library) => ({ library, figures: {} as Figures })),
      { url, server: redis, aof: false },
    );
    if (aofUrl && aofServer)
      await latencyRows(
        libraries.map((library) => ({ library, figures: {} as Figures })),
        { url: aofUrl, server: aofServer, aof: true },
      );
    await closeLibraries(libraries);
    await aofServer?.quit();
    await redis.quit();
    return;
  }
  const serverInfo = await redis.info('server');
  const redisVersion = /redis_version:(\S+)/.exec(serverInfo)?.[1];
  const aofUrl = process.env.BENCH_AOF_EVERYSEC_URL;
  const aofServer = aofUrl ? new Redis(aofUrl) : undefined;
  const libraries = startLibraries(['ours', 'bull', 'bee', 'nest']);
  const [a, b, q, n] = libraries.map(() => ({ drain: {}, latency: {} }) as unknown as Figures);
  await producerRows(libraries, [a, b, q, n]);
  const queues = [
    { library: libraries[0], figures: a },
    { library: libraries[1], figures: b },
    { library: libraries[2], figures: q },
  ];
  log('\n== batch enqueue and drains, libraries taking turns in each round');
  await throughputRows(queues);
  log('\n== payloads of 1 KB and 16 KB, libraries taking turns in each round');
  await payloadRows([
    ...queues.map((entry) => ({ ...entry, queue: true })),
    { library: libraries[3], figures: n, queue: false },
  ]);
  log("\n== latency at half each queue's highest drain rate, libraries taking turns in each round");
  await halfRateLatencyRows(queues);
  log('\n== latency, libraries taking turns in each round');
  await latencyRows([...queues, { library: libraries[3], figures: n }], { url, server: redis, aof: false });
  if (aofUrl && aofServer) await latencyRows(queues, { url: aofUrl, server: aofServer, aof: true });
  await aofServer?.quit();
  await costRows(queues);
  await closeLibraries(libraries);
  // Our own rows (scale, groups, durability, dashboard) run here, in a process no other library ran in.
  const ours = new OursDriver(url);
  log('\n== scale (nestjs-redis-tasks): drain 20,000 at concurrency 16');
  const [few, many] = await scale(ours);
  log(
    `10 clients: ${spread(few)} tasks/s; 10,000 clients: ${spread(many)} tasks/s (${((many.median / few.median) * 100).toFixed(1)}%)`,
  );
  log('\n== consumer groups (nestjs-redis-tasks): drain 20,000, one worker of concurrency 16 per group');
  const oneGroup = await samples(() => groupsDrain(ours, 1));
  const threeGroups = await samples(() => groupsDrain(ours, 3));
  log(
    `1 group: ${spread(oneGroup)} tasks/s; 3 groups: ${spread(threeGroups)} tasks/s, each task run 3 times (${((threeGroups.median / oneGroup.median) * 100).toFixed(1)}%)`,
  );
  await ours.close();
  const durabilityTable = await durability();
  const dashboard = dashboardLine(await dashboardScale(url));
  const records = recordLines(await recordBytes(url));
  const scheduleCostLine = scheduleLine(await scheduleCost(url));
  const crowd = crowdLines(await crowdFigures(url));
  const schedules = `${scheduleCostLine}\n${crowd}`;
  const tracking = await trackingRows();
  const coalescing = await coalesceTable();
  const batchesTable = await batchTable();
  const flowsTable = await flowTable();
  const outboxTableText = await outboxTable();
  const stepsTable = await stepTable();
  const connections = await connectionsTable(url);
  const idle = `${claimTable(await claimRows(url))}\n\n${idleTable([...(await idleRows(url)), ...(await anchorIdleRows(url))])}`;
  const nodes = await nodesSection();
  const handoff = handoffSection(await handoffFigures(url));

  const table = comparisonTable([a, b, q, n], few, many, oneGroup, threeGroups);
  // Read from node_modules: not every package exports its package.json.
  const version = (name: string) =>
    (
      JSON.parse(readFileSync(new URL(`../../node_modules/${name}/package.json`, import.meta.url), 'utf8')) as {
        version: string;
      }
    ).version;
  const versions = {
    node: process.version,
    redis: redisVersion,
    bullmq: version('bullmq'),
    bee: version('bee-queue'),
    ioredis: version('ioredis'),
    nest: version('@nestjs/microservices'),
  };
  const machine = `${type()}, ${cpus().length} × ${cpus()[0]?.model ?? 'unknown CPU'}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB`;
  const header = [
    '# Benchmark results',
    '',
    `Produced by \`npm run bench\` on ${new Date().toISOString().slice(0, 10)}; every library in the same run, on the same Redis,`,
    'each in a Node process of its own (its producer and worker in that one process: libraries sharing a process slowed',
    'each other through the ioredis code two of them share with BullMQ), no-op handler, tiny payloads (`{ i, t }`) except in the',
    `payload rows (a filler string of 1 KB or 16 KB in each task, ${PAYLOAD_TASKS} tasks a run); BullMQ jobs with \`removeOnComplete\`,`,
    "Bee-Queue jobs with `removeOnSuccess` (and `storeJobs: false`); Nest's `Transport.REDIS` is pub/sub (no backlog: no drain rows).",
    `Each figure is the median of ${REPEATS} runs (latency rows: ${LATENCY_REPEATS}), with the lowest and highest in parentheses. Ratios are ours against each`,
    'anchor, "×" meaning that many times better (higher rate, or lower time, bytes or CPU). Emit rows run with no worker;',
    'latency rows send 2,000 tasks/s to a worker of the given concurrency (the AOF rows: on a throwaway `redis-server` with',
    "`appendfsync everysec` on the project's disk), each run after a one-second warm-up at the rate (not timed); the",
    'half-rate rows send each queue library half of its own highest drain rate above (3 s timed, concurrency 64).',
    'The single-emit row and its two floors (a bare ioredis PING, a bare ioredis EVALSHA of an empty script) are measured',
    "in blocks of 250 that take turns in the library's own process, so noise hits the three alike.",
    'Runs are taken in rounds, the libraries taking turns in each (emit, batch, drain and latency rows alike; the emit, send, batch',
    "and drain rows after one round not timed: a process's first runs measure V8 compiling the code), so a",
    "stretch of this machine's noise hits every library of a round instead of whichever ran all its runs then.",
    '"Client commands" counts every ioredis command the process sent',
    '(producer included), an upper bound of round trips (Bee-Queue uses node-redis: not counted).',
    '',
    `- Machine: ${machine}`,
    `- Versions: Node ${versions.node}, Redis ${versions.redis}, BullMQ ${versions.bullmq}, Bee-Queue ${versions.bee}, ioredis ${versions.ioredis}, @nestjs/microservices ${versions.nest}`,
    `- Redis: ${process.env.BENCH_REDIS_SOURCE ?? url}`,
    '',
  ].join('\n');
  const durabilitySection = [
    '## What durability costs',
    '',
    'Enqueue rates of nestjs-redis-tasks alone under each setting, each on its own redis-server on this machine',
    '(AOF files on the project\'s ext4 disk, not a tmpfs; replicas on loopback). See the README\'s "Scaling out".',
    '',
    durabilityTable,
    '',
    '## What the dashboard costs',
    '',
    `- ${dashboard} (one \`readOverview\` script call per pattern, pipelined; median of 7 refreshes).`,
    '',
    '## Bytes per record',
    '',
    "What Redis spends on each per-task or per-call record (MEMORY USAGE, median of 50; the README's figures):",
    '',
    records,
    '',
    '## What recurring schedules cost',
    '',
    `- ${scheduleCostLine}. Counted on the server (INFO commandstats, Lua's own commands included).`,
    '',
    'Schedules due at the same tick, fired by separate processes (each takes a slice of the due schedules for a lease, so processes share the list; median of 3 runs, lowest and highest in parentheses):',
    '',
    ...crowd.split('\n').map((line) => `- ${line}`),
    '',
    ...TRACKING_INTRO,
    '',
    tracking,
    '',
    ...COALESCE_INTRO,
    '',
    coalescing,
    '',
    ...BATCH_INTRO,
    '',
    batchesTable,
    '',
    ...FLOW_INTRO,
    '',
    flowsTable,
    '',
    ...OUTBOX_INTRO,
    '',
    outboxTableText,
    '',
    ...STEP_INTRO,
    '',
    stepsTable,
    '',
    ...CONNECTIONS_INTRO,
    '',
    connections,
    '',
    ...CONNECTIONS_LATENCY,
    '',
    ...IDLE_INTRO,
    '',
    idle,
    '',
    ...HANDOFF_INTRO,
    '',
    handoff,
    '',
    nodes,
  ].join('\n');
  log(`\n${table}\n\n${durabilityTable}\n\n${dashboard}\n\n${schedules}`);
  if (process.env.BENCH_WRITE !== '0') {
    writeFileSync(
      new URL('../../bench/RESULTS.md', import.meta.url),
      `${header}\n${table}\n\n${TABLE_READINGS.join('\n')}\n\n${durabilitySection}\n`,
    );
    log('\nwritten to bench/RESULTS.md');
  }
  await redis.quit();
}

if (process.env.BENCH_LIBRARY) {
  // A library's own process (see isolation.ts): measurements on request, until the parent closes it.
  serveLibrary(libraryOps(process.env.BENCH_LIBRARY as LibraryKind));
} else {
  main().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
}
