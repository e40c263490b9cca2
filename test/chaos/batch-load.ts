import { RedisTaskRecordBuilder, type BatchSummary, type RedisTaskClient } from '../../lib/index.js';

/** What each batch of a load must call back with. */
export type ExpectedBatches = Map<string, { total: number; failed: number }>;

/** The patterns a load's tasks go to (the chaos worker's handlers), and its callback's. */
export const BATCH_PATTERNS = ['chaos.batch.a', 'chaos.batch.b', 'chaos.batch.c'] as const;

/**
 * `count` batches `b0`, `b1`, ... of `share(b)` tasks on each of the three patterns (from 4 clients, 20 ms of
 * work each), those that `fails(b, i)` says failing every attempt, each sealed; what each must call back with.
 */
export async function emitBatchLoad(
  client: RedisTaskClient,
  count: number,
  share: (batch: number) => number,
  fails: (batch: number, task: number) => boolean,
): Promise<ExpectedBatches> {
  const expected: ExpectedBatches = new Map();
  for (let b = 0; b < count; b++) {
    const id = `b${b}`;
    const size = share(b);
    const batch = client.batch({ id, onComplete: { pattern: 'chaos.batch.done' } });
    let failed = 0;
    for (const pattern of BATCH_PATTERNS) {
      const items = Array.from({ length: size }, (_, i) => {
        const fail = fails(b, i);
        if (fail) failed++;
        return new RedisTaskRecordBuilder({ key: `${id}.${pattern}.${i}`, workMs: 20, ...(fail ? { fail } : {}) })
          .setClientId(`client-${i % 4}`)
          .build();
      });
      await batch.add(pattern, items);
    }
    await batch.seal();
    expected.set(id, { total: 3 * size, failed });
  }
  return expected;
}

/**
 * What is wrong with the callbacks the chaos worker recorded (`runs`: callback runs per batch id; `firsts`:
 * those that were a first attempt; `summaries`: the last summary per batch id, JSON): a batch with no
 * callback, with two callback tasks (two first attempts: a run again after a kill -9 mid-run is a second
 * attempt of the same task, at-least-once as every handler), or with other counts.
 */
export function wrongCallbacks(
  expected: ExpectedBatches,
  { runs, firsts }: { runs: Record<string, string>; firsts: Record<string, string> },
  summaries: Record<string, string>,
): string[] {
  const wrong: string[] = [];
  for (const [id, { total, failed }] of expected) {
    const summary = JSON.parse(summaries[id] ?? '{}') as Partial<BatchSummary>;
    if (runs[id] === undefined) wrong.push(`${id}: no callback`);
    if (Number(firsts[id] ?? 0) > 1) wrong.push(`${id}: ${firsts[id]} callback tasks`);
    if (summary.total !== total || summary.failed !== failed || summary.succeeded !== total - failed) {
      wrong.push(
        `${id}: ${summary.total}/${summary.succeeded}/${summary.failed}, expected ${total}/${total - failed}/${failed}`,
      );
    }
  }
  return wrong;
}

/** How many callback runs were a task's run again (its worker killed mid-run), not its first attempt. */
export function rerunsOf({ runs, firsts }: { runs: Record<string, string>; firsts: Record<string, string> }): number {
  return Object.entries(runs).reduce((sum, [id, count]) => sum + Number(count) - Number(firsts[id] ?? 0), 0);
}
