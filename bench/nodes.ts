import { Redis } from 'ioredis';
import { BullMqDriver, OursDriver, type BenchTask, type Driver } from './drivers.js';
import { Completion, roundSample, serverSnapshot, shownSample, type ServerSnapshot } from './measure.js';

/** Tasks per run: enqueued in batches of 1,000 from CLIENTS clients, then drained at concurrency 64. */
const TASKS = Number(process.env.BENCH_NODE_TASKS ?? 30_000);
/** Client ids of the tasks: ours places a client's tasks in one shard by a hash of its id. */
const CLIENTS = 300;
const REPEATS = Number(process.env.BENCH_REPEATS ?? 3);
/** Primaries the model scales one queue over. */
const MODEL_PRIMARIES = [1, 3, 6, 12];

export const NODES_INTRO = [
  '## Redis CPU per node: one queue on a 3-primary Cluster, and the scaling it predicts',
  '',
  'One 2-core machine cannot show three primaries serving three times the tasks (the three `redis-server`s, the',
  'producer and the worker share two cores), so this measures what predicts it: the Redis CPU each primary of a',
  'Cluster spends per task. A throwaway Cluster of 3 primaries (`redis-cli --cluster create`, slots split evenly);',
  `${TASKS.toLocaleString('en-US')} tasks from ${CLIENTS} clients enqueued in batches of 1,000, then drained by one worker of concurrency 64;`,
  "each primary's CPU (INFO cpu, user + sys, its idle rate over the same time taken off) from the first enqueue to",
  'the last task. Ours: the pattern with `shards: 3` (one shard per primary). BullMQ: one queue, its documented',
  'Cluster set-up (a `{hash tag}` prefix), so every key of the queue is in one slot, on one primary. Median of',
  `${REPEATS} runs each, the two libraries taking turns, spread in parentheses.`,
  '',
  'The model: a primary spends its Redis CPU per task on the tasks of its own slots, so its ceiling is one core',
  "second divided by that (tasks/s when its Redis is 100% busy; Redis runs commands on one thread). A queue's",
  'ceiling on N primaries is N times the lowest ceiling of its primaries for ours (`shards: N`, the shards spread',
  "evenly), and one primary's for BullMQ (one slot per queue, whatever N). It assumes producers and workers",
  'scale out beside it (each on machines of their own) and a network that is not the limit; the figures are this',
  "machine's, whose cores are shared: a primary on a core of its own spends less per task.",
];

interface NodeRun {
  /** Tasks of the run on each primary. */
  readonly tasks: number[];
  /** Redis CPU of each primary over the run (µs, its idle rate taken off). */
  readonly cpuMicros: number[];
  /** Enqueue to last task (tasks/s). */
  readonly rate: number;
}

interface NodeFigures {
  readonly name: string;
  readonly runs: NodeRun[];
}

/** Idle Redis CPU of each node (µs per ms): the cluster bus and cron, taken off each run. */
async function idleRates(servers: readonly Redis[]): Promise<number[]> {
  const before = await Promise.all(servers.map((server) => serverSnapshot(server)));
  const start = performance.now();
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  const after = await Promise.all(servers.map((server) => serverSnapshot(server)));
  const ms = performance.now() - start;
  return after.map((snapshot, i) => Math.max(0, (snapshot.cpuMicros - before[i].cpuMicros) / ms));
}

/** Tasks waiting on each node after the fill: ours by its pending counts, BullMQ by its wait list's length. */
async function waitingOn(server: Redis, ours: boolean): Promise<number> {
  let total = 0;
  let cursor = '0';
  do {
    const [next, keys] = await server.scan(cursor, 'MATCH', ours ? '*:pending-count' : '*:wait', 'COUNT', 1000);
    cursor = next;
    for (const key of keys) total += ours ? Number(await server.get(key)) : await server.llen(key);
  } while (cursor !== '0');
  return total;
}

async function nodeRun(driver: Driver, servers: readonly Redis[], ours: boolean, idle: number[]): Promise<NodeRun> {
  await driver.begin('nodes');
  const done = new Completion();
  const before: ServerSnapshot[] = await Promise.all(servers.map((server) => serverSnapshot(server)));
  const start = performance.now();
  for (let from = 0; from < TASKS; from += 1_000) {
    const items: BenchTask[] = Array.from({ length: 1_000 }, (_, i) => ({ i: from + i, t: 0 }));
    await driver.enqueueBatch(items, (index) => `client-${(from + index) % CLIENTS}`);
  }
  const tasks = await Promise.all(servers.map((server) => waitingOn(server, ours)));
  await driver.startWorker(64, () => done.hit());
  await done.until(TASKS);
  const ms = performance.now() - start;
  const after = await Promise.all(servers.map((server) => serverSnapshot(server)));
  await driver.stopWorker();
  await Promise.all(servers.map((server) => server.flushall()));
  return {
    tasks,
    cpuMicros: after.map((snapshot, i) => Math.max(0, snapshot.cpuMicros - before[i].cpuMicros - idle[i] * ms)),
    rate: TASKS / (ms / 1000),
  };
}

const median = (values: number[]): number => roundSample(values).median;
const spreadOf = (values: number[], digits = 0): string => shownSample(roundSample(values), digits);

/** The row of one library: per primary CPU per own task, shares, the ceiling and the model. */
function rowOf({ name, runs }: NodeFigures, ours: boolean): string {
  const primaries = runs[0].tasks.length;
  const perOwnTask = (run: NodeRun, i: number) => (run.tasks[i] > 0 ? run.cpuMicros[i] / run.tasks[i] : Number.NaN);
  const share = (run: NodeRun, i: number) => (100 * run.cpuMicros[i]) / run.cpuMicros.reduce((a, b) => a + b, 0);
  const nodes = Array.from({ length: primaries }, (_, i) => i);
  const busy = nodes.filter((i) => runs.every((run) => run.tasks[i] > 0));
  // A primary's ceiling: tasks/s of its own at one core second per second of Redis CPU.
  const ceilings = runs.map((run) => Math.min(...busy.map((i) => 1e6 / perOwnTask(run, i))));
  const model = MODEL_PRIMARIES.map((n) => median(ceilings) * (ours ? n : 1));
  return [
    name,
    spreadOf(runs.map((run) => run.rate)),
    nodes.map((i) => `${spreadOf(runs.map((run) => 100 * (run.tasks[i] / TASKS)))}%`).join(' / '),
    nodes.map((i) => `${spreadOf(runs.map((run) => share(run, i)))}%`).join(' / '),
    nodes
      .map((i) =>
        busy.includes(i)
          ? spreadOf(
              runs.map((run) => perOwnTask(run, i)),
              1,
            )
          : '–',
      )
      .join(' / '),
    spreadOf(ceilings),
    model.map((rate) => rate.toFixed(0)).join(' / '),
  ].join(' | ');
}

/** The per-node table: ours (`shards: 3`) and BullMQ (one slot) on the Cluster whose primaries' ports are given. */
export async function nodesTable(ports: readonly number[]): Promise<string> {
  const nodes = ports.map((port) => ({ host: '127.0.0.1', port }));
  const servers = ports.map((port) => new Redis({ host: '127.0.0.1', port }));
  const libraries = [
    { name: 'nestjs-redis-tasks', ours: true, driver: new OursDriver('', {}, false, { nodes, shards: ports.length }) },
    { name: 'BullMQ', ours: false, driver: new BullMqDriver('', nodes) as Driver },
  ];
  const figures: NodeFigures[] = libraries.map(({ name }) => ({ name, runs: [] }));
  const idle = await idleRates(servers);
  for (const { driver, ours } of libraries) await nodeRun(driver, servers, ours, idle); // not timed (compiling)
  for (let round = 0; round < REPEATS; round++) {
    for (const [l, { driver, ours }] of libraries.entries())
      figures[l].runs.push(await nodeRun(driver, servers, ours, idle));
  }
  for (const { driver } of libraries) await driver.close();
  for (const server of servers) server.disconnect();
  const header = [
    'library',
    'enqueue + drain here (tasks/s)',
    'tasks on primary 1 / 2 / 3',
    'share of Redis CPU, primary 1 / 2 / 3',
    'Redis CPU per task of its own, primary 1 / 2 / 3 (µs)',
    'ceiling per primary: its tasks/s at one core (the lowest)',
    `model: one queue on ${MODEL_PRIMARIES.join(' / ')} primaries (tasks/s)`,
  ];
  return [
    `| ${header.join(' | ')} |`,
    `|${header.map((_, i) => (i === 0 ? '---' : '---:')).join('|')}|`,
    ...figures.map((f, l) => `| ${rowOf(f, libraries[l].ours)} |`),
  ].join('\n');
}
