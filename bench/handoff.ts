import { Redis } from 'ioredis';
import { firstValueFrom } from 'rxjs';
import { RedisTaskClient } from '../lib/index.js';
import { readScriptDefinitions } from '../lib/core/redis/scripts.js';
import { deleteMatching, percentile, sleep } from './measure.js';

/**
 * Where one wake-up's time goes: an idle worker blocked on its shard's bell with its claim pipelined
 * behind (idle-wait.ts), woken by one task. Each step is taken off the bare RPUSH -> BLPOP hand-off one
 * at a time, on one Node process and one Redis, each try a third of a millisecond after the last (the rate
 * of the latency rows: Redis and the CPU caches are cold at every try, as they are at 2,000 tasks/s), so the
 * rows show what the claim script and the enqueue add to the floor, and what a claim costs Redis cold and hot.
 */
export interface HandoffRow {
  readonly what: string;
  readonly p50: number;
  readonly p99: number;
}

export interface HandoffFigures {
  readonly rows: readonly HandoffRow[];
  /** Redis time of one claimTasks call taking one task (INFO commandstats), median µs: calls apart, and back to back. */
  readonly claimColdMicros: number;
  readonly claimHotMicros: number;
}

const TRIES = 1_500;
const GAP_MS = 0.3;
const WORKER = 'handoff-worker';

function row(what: string, millis: number[]): HandoffRow {
  const sorted = millis.sort((a, b) => a - b);
  return { what, p50: percentile(sorted, 50), p99: percentile(sorted, 99) };
}

/** Times `push` until `woken` (armed first, after `prepare`) settles, TRIES times, GAP_MS apart. */
async function handoffs(
  arm: (i: number) => Promise<unknown>,
  push: (i: number) => unknown,
  prepare?: (i: number) => Promise<unknown>,
): Promise<number[]> {
  const millis: number[] = [];
  for (let i = 0; i < TRIES; i++) {
    await prepare?.(i);
    const woken = arm(i);
    await sleep(GAP_MS);
    const sentAt = performance.now();
    push(i);
    await woken;
    millis.push(performance.now() - sentAt);
  }
  return millis;
}

async function evalshaMicros(redis: Redis): Promise<{ calls: number; usec: number }> {
  const found = /cmdstat_evalsha:calls=(\d+),usec=(\d+)/.exec(await redis.info('commandstats'));
  return { calls: Number(found?.[1] ?? 0), usec: Number(found?.[2] ?? 0) };
}

export async function handoffFigures(url: string): Promise<HandoffFigures> {
  const waiter = new Redis(url);
  const pusher = new Redis(url);
  const prefix = `handoff${Date.now().toString(36)}`;
  const client = new RedisTaskClient({ connection: url, prefix });
  try {
    await client.connect();
    const claimSource = readScriptDefinitions().find((script) => script.name === 'claimTasks')?.flagged.source;
    if (!claimSource) throw new Error('claimTasks not found');
    const claim = String(await waiter.script('LOAD', claimSource));
    const empty = String(await waiter.script('LOAD', 'return 1'));
    const base = `${prefix}:{p}`;
    const bell = `${base}:bell`;
    const bare = `${prefix}:bare`;
    await waiter.zadd(`${base}:workers`, Date.now() + 3_600_000, WORKER);
    const claimOne = (i: number) => waiter.evalsha(claim, 1, base, 1, WORKER, 0, `h${i}:`, 30_000);
    const rows: HandoffRow[] = [];
    rows.push(
      row(
        'RPUSH -> BLPOP (the floor)',
        await handoffs(
          () => waiter.blpop(bare, 0),
          () => pusher.rpush(bare, '1'),
        ),
      ),
    );
    rows.push(
      row(
        'a token on the bell -> BLPOP bell, an empty script pipelined behind',
        await handoffs(
          () => (void waiter.blpop(bell, 0), waiter.evalsha(empty, 0)),
          () => pusher.rpush(bell, '1'),
        ),
      ),
    );
    // The task waits (emitted first, its bell token taken off): the token alone wakes the claim.
    rows.push(
      row(
        'a token on the bell -> BLPOP bell, claimTasks of the one waiting task pipelined behind',
        await handoffs(
          (i) => (void waiter.blpop(bell, 0), claimOne(i)),
          () => pusher.rpush(bell, '1'),
          async (i) => {
            await firstValueFrom(client.emit('p', { i }));
            await pusher.del(bell);
          },
        ),
      ),
    );
    rows.push(
      row(
        'emit() -> BLPOP bell, claimTasks pipelined behind (the wake-up path, without the handler dispatch)',
        await handoffs(
          (i) => (void waiter.blpop(bell, 0), claimOne(i)),
          (i) => void firstValueFrom(client.emit('p', { i })),
        ),
      ),
    );
    // Redis time of a claim of one task: calls apart (cold), then back to back (hot).
    const cold: number[] = [];
    for (let i = 0; i < TRIES; i++) {
      await firstValueFrom(client.emit('p', { i }));
      await sleep(GAP_MS);
      const before = await evalshaMicros(waiter);
      await claimOne(i);
      const after = await evalshaMicros(waiter);
      cold.push(after.usec - before.usec);
    }
    await client.emitBatch(
      'p',
      Array.from({ length: TRIES }, (_, i) => ({ i })),
    );
    const before = await evalshaMicros(waiter);
    for (let i = 0; i < TRIES; i++) await claimOne(i);
    const after = await evalshaMicros(waiter);
    const sortedCold = cold.sort((a, b) => a - b);
    return {
      rows,
      claimColdMicros: percentile(sortedCold, 50),
      claimHotMicros: (after.usec - before.usec) / Math.max(1, after.calls - before.calls),
    };
  } finally {
    await deleteMatching(pusher, `${prefix}:*`);
    await client.close();
    waiter.disconnect();
    pusher.disconnect();
  }
}

export function handoffSection(figures: HandoffFigures): string {
  const lines = [
    '| step | p50 (ms) | p99 (ms) |',
    '|---|---:|---:|',
    ...figures.rows.map((r) => `| ${r.what} | ${r.p50.toFixed(3)} | ${r.p99.toFixed(3)} |`),
    '',
    `Redis time of one claimTasks call taking one task (INFO commandstats): ${figures.claimColdMicros.toFixed(0)} µs ` +
      `median with calls ${GAP_MS} ms apart, ${figures.claimHotMicros.toFixed(1)} µs a call back to back.`,
  ];
  return lines.join('\n');
}

export const HANDOFF_INTRO = [
  "## One wake-up, step by step: where concurrency 1's latency goes",
  '',
  'An idle worker waits in `BLPOP <base>:bell` with its claim pipelined behind it; a task wakes it. Each row',
  'adds one step to the bare RPUSH -> BLPOP hand-off: the claim script run by the wake, then the enqueue that rings',
  'the bell. One Node process and one Redis, each try a third of a millisecond after the last (as at the 2,000',
  "tasks/s of the latency rows, Redis and the CPU caches are cold at each try), 1,500 tries, nestjs-redis-tasks's",
  'own scripts loaded as the library loads them. The handler dispatch (Nest) and the second task of a pair (which',
  'waits for the first) are not in these rows: the latency rows above hold them.',
];
