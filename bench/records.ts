import { Redis } from 'ioredis';
import { RedisTaskRecordBuilder } from '../lib/index.js';
import { OursDriver } from './drivers.js';
import { sleep } from './measure.js';

/** Bytes Redis spends on each kind of per-task or per-call record (MEMORY USAGE), medians of many. */
export interface RecordBytes {
  readonly callRecord: number;
  readonly trackedWaiting: number;
  readonly trackedEnded: number;
  readonly coalescedWaiting: number;
  readonly plainWaiting: number;
}

const COUNT = 50;

async function usage(redis: Redis, pattern: string): Promise<number> {
  const keys: string[] = [];
  let cursor = '0';
  do {
    const [next, found] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = next;
    keys.push(...found);
  } while (cursor !== '0');
  const bytes = await Promise.all(
    keys.map(async (key) => Number((await redis.call('MEMORY', 'USAGE', key, 'SAMPLES', '0')) ?? 0)),
  );
  const sorted = bytes.sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? 0;
}

/** The bytes of each record, read off a throwaway prefix: the README's per-record figures come from here. */
export async function recordBytes(url: string): Promise<RecordBytes> {
  const redis = new Redis(url);
  const plain = new OursDriver(url);
  const tracked = new OursDriver(url, {}, true);
  try {
    await plain.begin('records');
    const small = (i: number) => ({ i, t: 0, pad: 'x'.repeat(100 - 20) });
    for (let i = 0; i < COUNT; i++) await plain.enqueue(small(i));
    const callRecord = await usage(redis, `${plain.keyPattern.slice(0, -1)}*:call:*`);
    // A waiting task's bytes: its pending list, per task (one client, COUNT tasks).
    const listBytes = await usage(redis, `${plain.keyPattern.slice(0, -1)}*:pending:*`);
    await plain.emitRecords(
      Array.from({ length: COUNT }, (_, i) => new RedisTaskRecordBuilder(small(i)).setCoalesceKey(`k${i}`).build()),
    );
    const coalescedWaiting = await usage(redis, `${plain.keyPattern.slice(0, -1)}*:coalesce:*`);
    await tracked.begin('records-tracked');
    for (let i = 0; i < COUNT; i++) await tracked.enqueue(small(i));
    const trackedWaiting =
      (await usage(redis, `${tracked.keyPattern.slice(0, -1)}*:task:*`)) +
      (await usage(redis, `${tracked.keyPattern.slice(0, -1)}*:task-entry:*`));
    await tracked.startWorker(8, () => undefined);
    await sleep(1_000);
    const trackedEnded = await usage(redis, `${tracked.keyPattern.slice(0, -1)}*:task:*`);
    await tracked.stopWorker();
    return { callRecord, trackedWaiting, trackedEnded, coalescedWaiting, plainWaiting: Math.round(listBytes / COUNT) };
  } finally {
    await plain.close();
    await tracked.close();
    redis.disconnect();
  }
}

export function recordLines(bytes: RecordBytes): string {
  return [
    `- an enqueue call's record (\`<root>:call:<id>\`, kept the call's deadline and 10 s): ${bytes.callRecord} bytes`,
    `- a plain waiting task of 100 bytes of payload, in its client's list: ${bytes.plainWaiting} bytes`,
    `- a tracked task's index and entry while it waits: ${bytes.trackedWaiting} bytes; its index once it ended: ${bytes.trackedEnded} bytes`,
    `- a coalescing key's record while its task of 100 bytes waits: ${bytes.coalescedWaiting} bytes (the task's own entry in its list besides)`,
  ].join('\n');
}
