import { randomBytes } from 'node:crypto';
import { FlowProducer, Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import type { OursDriver } from './drivers.js';
import { Completion, deleteMatching, roundSample, serverSnapshot, shownSample } from './measure.js';

/** Flows per round (four nodes each). */
const FLOWS = 250;
const NODES = 4;

/** What a round runs: plain tasks (four per call), diamonds, trees of three children and a parent; whose. */
type FlowCase =
  'plain (emitBatch of 4)' | 'diamond (A -> B, C -> D)' | 'tree (3 children -> parent)' | 'BullMQ tree (FlowProducer)';
const CASES: readonly FlowCase[] = [
  'plain (emitBatch of 4)',
  'diamond (A -> B, C -> D)',
  'tree (3 children -> parent)',
  'BullMQ tree (FlowProducer)',
];

interface Round {
  /** Redis CPU (µs) and commands (Lua's own included) per node, from the first create to the last node run. */
  readonly micros: number;
  readonly commands: number;
  /** Nodes per second, from the first create until every node ran. */
  readonly rate: number;
}

const task = (i: number) => ({ i, t: performance.now() });

async function oursRound(driver: OursDriver, redis: Redis, kind: FlowCase): Promise<Round> {
  await driver.begin('flows');
  const done = new Completion();
  await driver.startWorker(16, () => done.hit());
  const before = await serverSnapshot(redis);
  const start = performance.now();
  for (let f = 0; f < FLOWS; f++) {
    const at = f * NODES;
    if (kind === 'plain (emitBatch of 4)') {
      await driver.enqueueBatch([task(at), task(at + 1), task(at + 2), task(at + 3)]);
      continue;
    }
    const node = (id: string, i: number, deps: string[] = []) => ({
      id,
      pattern: 'bench.task',
      payload: task(i),
      deps,
    });
    await driver.flow({
      nodes:
        kind === 'diamond (A -> B, C -> D)'
          ? [node('A', at), node('B', at + 1, ['A']), node('C', at + 2, ['A']), node('D', at + 3, ['B', 'C'])]
          : [node('L1', at), node('L2', at + 1), node('L3', at + 2), node('P', at + 3, ['L1', 'L2', 'L3'])],
    });
  }
  await done.until(FLOWS * NODES);
  const rate = (FLOWS * NODES) / ((performance.now() - start) / 1000);
  const after = await serverSnapshot(redis);
  await driver.stopWorker();
  await deleteMatching(redis, driver.keyPattern);
  return per(before, after, rate);
}

/** BullMQ's FlowProducer: a parent job with three children, the parent run once they completed; one Worker of 16. */
async function bullRound(url: string, redis: Redis): Promise<Round> {
  const parsed = new URL(url);
  const connection = { host: parsed.hostname, port: Number(parsed.port || 6379), maxRetriesPerRequest: null };
  const prefix = `bf${randomBytes(3).toString('hex')}`;
  const queueName = 'flows';
  const producer = new FlowProducer({ connection, prefix });
  const done = new Completion();
  const worker = new Worker(queueName, async () => done.hit(), {
    connection,
    prefix,
    concurrency: 16,
    removeOnComplete: { count: 0 },
  });
  await worker.waitUntilReady();
  const opts = { removeOnComplete: true, removeOnFail: true };
  const before = await serverSnapshot(redis);
  const start = performance.now();
  for (let f = 0; f < FLOWS; f++) {
    const at = f * NODES;
    await producer.add({
      name: 'P',
      queueName,
      data: task(at + 3),
      opts,
      children: [0, 1, 2].map((c) => ({ name: `L${c}`, queueName, data: task(at + c), opts })),
    });
  }
  await done.until(FLOWS * NODES);
  const rate = (FLOWS * NODES) / ((performance.now() - start) / 1000);
  const after = await serverSnapshot(redis);
  await worker.close();
  await producer.close();
  await deleteMatching(redis, `${prefix}:*`);
  return per(before, after, rate);
}

function per(
  before: Awaited<ReturnType<typeof serverSnapshot>>,
  after: Awaited<ReturnType<typeof serverSnapshot>>,
  rate: number,
): Round {
  const nodes = FLOWS * NODES;
  return {
    micros: (after.cpuMicros - before.cpuMicros) / nodes,
    commands: (after.commands - before.commands) / nodes,
    rate,
  };
}

/**
 * What a flow costs per node against a plain task, and against BullMQ's FlowProducer for a tree of the same
 * size: 250 flows of 4 nodes created one awaited call after another and run by one worker of concurrency 16
 * (ours: its own folds release each node's children), until every node ran. Rounds take turns.
 */
export async function flowRows(driver: OursDriver, url: string, redis: Redis, repeats: number): Promise<string> {
  const run = (kind: FlowCase) =>
    kind === 'BullMQ tree (FlowProducer)' ? bullRound(url, redis) : oursRound(driver, redis, kind);
  for (const kind of CASES) await run(kind); // warm-up (JIT), not reported
  const rounds = new Map<FlowCase, Round[]>(CASES.map((kind) => [kind, []]));
  for (let r = 0; r < repeats; r++) {
    for (const kind of CASES) rounds.get(kind)?.push(await run(kind));
  }
  const rows = CASES.map((kind) => {
    const of = (field: keyof Round) => roundSample((rounds.get(kind) ?? []).map((one) => one[field]));
    return `| ${kind} | ${shownSample(of('rate'), 0)} | ${shownSample(of('micros'), 1)} | ${shownSample(of('commands'), 1)} |`;
  });
  return [
    '| flow | create to last node (nodes/s) | Redis CPU per node (µs) | Redis commands per node |',
    '|---|---:|---:|---:|',
    ...rows,
  ].join('\n');
}

/** What bench/RESULTS.md says above the flow rows. */
export const FLOW_INTRO = [
  '## What flows cost',
  '',
  `${FLOWS} flows of ${NODES} nodes, each created by one awaited call, run by one worker of concurrency 16 until every node ran;`,
  'rounds taking turns. nestjs-redis-tasks: plain tasks (one emitBatch of 4 per flow), a diamond, a tree of three children and',
  'their parent; BullMQ: the same tree with its FlowProducer (the parent runs once its children completed). Redis CPU and commands',
  "(Lua's own included) per node cover the creation, the runs, the folds that release the children and, for BullMQ, its parent's",
  'dependency bookkeeping.',
];
