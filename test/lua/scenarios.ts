import { COALESCE_MODE_CODES, encodeEntry, type CoalesceMode } from '../../lib/core/model/codec.js';
import { gatewayOf } from '../../lib/core/redis/gateway.js';
import { pushEnqueueFields, startEnqueueCall } from '../../lib/core/redis/enqueue-fields.js';
import { PrefixKeys, type QueueKeys } from '../../lib/core/redis/keys.js';
import type { DueSchedule } from '../../lib/core/redis/schedule-gateway.js';
import { claimAs, type TestRedis } from '../support/redis.js';

/** A script's call on a sound queue: the state it expects, and the call as its caller makes it. */
export interface Scenario {
  /** Puts the queue in the state the script's call expects (tasks waiting, claimed, delayed...). */
  setup(keys: QueueKeys): Promise<unknown>;
  /** The script's call, as its caller makes it. */
  run(keys: QueueKeys, state: unknown): Promise<unknown>;
}

/** Helpers that put a queue in a state, as `worker` on `redis`: entries, enqueues, claims. */
export function queueHelpers(redis: TestRedis, worker: string) {
  const gateway = gatewayOf(redis);
  function entry(
    id: string,
    clientId = 'a',
    attempts = 0,
    priority = 0,
    coalesce?: CoalesceMode,
    batch?: string,
    flow?: string,
  ): string {
    // A coalesced task (stored form version 2) carries its key (k1) first, and a send() caller's channel; a
    // batch's task, its batch first; a flow's node, its flow and node (n1) first.
    const latest = coalesce
      ? { v: 2, coalesce: 'k1', coalesceMode: COALESCE_MODE_CODES[coalesce], replyTo: 'chan' }
      : batch
        ? { v: 2, batch }
        : flow
          ? { v: 2, flow, node: 'n1' }
          : {};
    return encodeEntry(
      { ...latest, id, clientId, payload: { id }, enqueuedAt: 1, ...(priority ? { priority } : {}) },
      attempts,
    );
  }

  async function enqueue(
    keys: QueueKeys,
    tasks: {
      id: string;
      client?: string;
      priority?: number;
      delayMs?: number;
      dedup?: string;
      track?: boolean;
      /** A coalesced task of key k1 (a debounce waits delayMs, at most 10 s). */
      coalesce?: CoalesceMode;
      /** A task of this batch. */
      batch?: string;
      /** Node n1 of this flow. */
      flow?: string;
    }[],
    recorded = false,
  ): Promise<unknown> {
    const args: (string | number)[] = [];
    if (recorded) startEnqueueCall(args, Date.now() + 5_000, 5_000);
    for (const task of tasks) {
      const client = task.client ?? 'a';
      const coalesce = task.coalesce;
      pushEnqueueFields(args, {
        id: task.id,
        clientId: client,
        entry: entry(task.id, client, 0, task.priority ?? 0, coalesce, task.batch, task.flow),
        priority: task.priority ?? 0,
        delayMs: task.delayMs ?? 0,
        deduplicationKey: task.dedup,
        deduplicationTtlMs: 60_000,
        awaitsReply: task.track === true,
        ...(task.track ? { track: { keepMs: 60_000, liveMs: 60_000 }, replyTo: 'chan' } : {}),
        ...(coalesce
          ? {
              coalesce: { key: 'k1', mode: coalesce, delayMs: task.delayMs ?? 0, maxWaitMs: 10_000 },
              replyTo: 'chan',
            }
          : {}),
      });
    }
    return redis.enqueueTasks(keys.root, ...args);
  }

  /**
   * Coalesced tasks of key k1 (client c): `running` claimed by `worker` and started (it runs), then
   * `after` emitted; the running one's token.
   */
  async function coalesced(
    keys: QueueKeys,
    running: { id: string; mode: CoalesceMode },
    after: { id: string; mode: CoalesceMode; delayMs?: number }[],
  ): Promise<string> {
    await enqueue(keys, [{ id: running.id, client: 'c', coalesce: running.mode }]);
    const [token, claimedEntry] = await claimAll(keys);
    if (!claimedEntry.includes(`"${running.id}"`)) throw new Error(`claimed ${claimedEntry}, not ${running.id}`);
    await gateway.track.startCoalesced(keys, worker, [{ token, id: running.id }]);
    if (after.length > 0)
      await enqueue(
        keys,
        after.map((task) => ({ ...task, client: 'c', coalesce: task.mode })),
      );
    return token;
  }

  /** Claims what the queue holds for `worker` (registered first); the token/entry pairs. */
  async function claimAll(keys: QueueKeys, cap = 0): Promise<string[]> {
    await gateway.heartbeat(keys, worker, 60_000);
    const claimed = await claimAs(redis, keys, worker, 10, [], cap);
    if (!Array.isArray(claimed)) throw new Error(`nothing claimed: ${claimed}`);
    return claimed;
  }

  return { gateway, entry, enqueue, coalesced, claimAll };
}

/** One scenario per script (by name), run as `worker` on `redis`. */
export function scenarios(redis: TestRedis, worker: string): Record<string, Scenario> {
  const { gateway, entry, enqueue, coalesced, claimAll } = queueHelpers(redis, worker);
  const schedules = gateway.schedules;
  const upsertArgs = () => [JSON.stringify({ pattern: 'q', everyMs: 60_000 }), 'api', Date.now(), Date.now() + 60_000];
  /** A stored schedule `id`, due at `dueAt` when given. */
  async function storeSchedule(keys: QueueKeys, id: string, dueAt?: number): Promise<void> {
    const scheduleKeys = new PrefixKeys(keys.prefix).schedules;
    await schedules.change(scheduleKeys, 'upsert', id, ...upsertArgs());
    if (dueAt !== undefined) await redis.zadd(scheduleKeys.due, dueAt, id);
  }

  const sound = (keys: QueueKeys) =>
    enqueue(keys, [
      { id: 'p1', track: true },
      { id: 'p2', priority: 3, track: true },
      { id: 'p3', client: 'b', dedup: 'd1', track: true },
    ]);

  /** A tracked task t1 (priority 2, deduplication key d1) claimed by `worker` and recorded running: its token. */
  async function runningTracked(keys: QueueKeys): Promise<string> {
    await enqueue(keys, [{ id: 't1', priority: 2, dedup: 'd1', track: true }]);
    const [token] = await claimAll(keys, 2);
    await gateway.track.start(keys, worker, [{ token, id: 't1', attempt: 1 }]);
    return token;
  }

  /** Batch b1 of the prefix of `keys`. */
  const batchKeys = (keys: QueueKeys) => new PrefixKeys(keys.prefix).batch('b1');
  /** Batch b1 opened with children c1 and c2, and `events` (seq, task id, outcome...) folded into it. */
  async function openBatchOf(keys: QueueKeys, events: string[]): Promise<void> {
    await gateway.batch.open(batchKeys(keys), { pattern: 'cb' }, undefined, 60_000);
    await gateway.batch.add(batchKeys(keys), 'q', ['c1', 'c2']);
    await gateway.batch.fold(batchKeys(keys), events);
  }

  /** Flow f1 of the prefix of `keys`. */
  const flowKeys = (keys: QueueKeys) => new PrefixKeys(keys.prefix).flow('f1');
  /** Flow f1 created: a diamond (a; b and c after a, c skipped when a parent fails; d after b and c), a released. */
  const openFlowOf = (keys: QueueKeys) =>
    gateway.flow.open(flowKeys(keys), 60_000, JSON.stringify({ pattern: 'cb' }), undefined, [
      ['a', 'f|', '{"pattern":"q","clientId":"a","payload":1}', ''],
      ['b', 'f|a', '{"pattern":"q","clientId":"a","payload":2}', ''],
      ['c', 's|a', '{"pattern":"q","clientId":"a","payload":3}', ''],
      ['d', 'r|b,c', '{"pattern":"q","clientId":"a","payload":4}', ''],
    ]);

  return {
    enqueueTasks: {
      setup: async (keys) => {
        await redis.sadd(keys.groups, 'default');
        // s1 of key k1 runs: the supersede below revokes it.
        await coalesced(keys, { id: 's1', mode: 'supersede' }, []);
      },
      run: (keys) =>
        enqueue(
          keys,
          [
            { id: 'n1' },
            { id: 'n2', priority: 2 },
            { id: 'n3', delayMs: 5_000 },
            { id: 'n4', dedup: 'd1' },
            { id: 't1', dedup: 'd2', track: true },
            { id: 'k2', coalesce: 'supersede', delayMs: 5_000 },
            { id: 'k3', coalesce: 'debounce', delayMs: 5_000 },
          ],
          true,
        ),
    },
    claimTasks: {
      setup: async (keys) => {
        await sound(keys);
        await gateway.heartbeat(keys, worker, 60_000);
      },
      run: (keys) =>
        gateway.claim(keys, {
          workerId: worker,
          wanted: 5,
          clientConcurrency: 2,
          leaseMs: 60_000,
          tokenPrefix: 'x.',
          acks: ['x.0.00001'],
        }),
    },
    ackTasks: {
      setup: async (keys) => {
        // k1 runs, k2 of its key waits parked (keep-last): the acknowledgement of k1 puts k2 in line.
        await sound(keys);
        const claimed = await claimAll(keys, 2);
        const running = await coalesced(keys, { id: 'k1', mode: 'keep-last' }, [{ id: 'k2', mode: 'keep-last' }]);
        // b1c, a task of batch b1, runs too: its success is recorded for its batch.
        await enqueue(keys, [{ id: 'b1c', client: 'd', batch: 'b1' }]);
        const [child] = await claimAll(keys);
        return [...claimed, child, running];
      },
      run: (keys, claimed) => {
        const [t1, , t2, , t3, , child] = claimed as string[];
        return gateway.acknowledge(keys, worker, [
          { token: child, taskId: 'b1c', resultTtlMs: 5_000 },
          { token: t1, taskId: 'p2', reply: { channel: 'chan', message: '"r"' }, resultTtlMs: 5_000 },
          { token: t2, taskId: 'p3', resultTtlMs: 5_000, tracked: keys.tracked('p3') },
          { token: t3, taskId: 'p1', deduplicationKey: 'd1', resultTtlMs: 5_000, tracked: keys.tracked('p1') },
          { token: (claimed as string[]).at(-1)!, taskId: 'k1', resultTtlMs: 5_000 },
        ]);
      },
    },
    retryTask: {
      setup: async (keys) => {
        await sound(keys);
        await claimAll(keys, 2);
        // k1 runs alone: its retry makes it the task its key waits for.
        return coalesced(keys, { id: 'k1', mode: 'replace' }, []);
      },
      run: (keys, token) => gateway.retry(keys, worker, token as string, 1_000, keys.tracked('p2')),
    },
    deadLetterTask: {
      setup: async (keys) => {
        await sound(keys);
        await claimAll(keys, 2);
        // k1 runs, k2 waits parked (keep-last): k1's dead letter puts k2 in line.
        return coalesced(keys, { id: 'k1', mode: 'keep-last' }, [{ id: 'k2', mode: 'keep-last' }]);
      },
      run: (keys, token) =>
        gateway.deadLetter(keys, worker, token as string, {
          record: '{"reason":"failed"}',
          cap: 10,
          taskId: 'p3',
          deduplicationKey: 'd1',
          reply: { channel: 'chan', message: '{}', ttlMs: 5_000 },
          tracked: keys.tracked('p1'),
        }),
    },
    requeueTasks: {
      setup: async (keys) => {
        // k1 runs and k2 of its key waits (replace): k1 returned is dropped (older than k2).
        await sound(keys);
        const claimed = await claimAll(keys, 2);
        return [...claimed, await coalesced(keys, { id: 'k1', mode: 'replace' }, [{ id: 'k2', mode: 'replace' }])];
      },
      run: (keys, claimed) => {
        const [t1, , t2, , t3] = claimed as string[];
        return gateway.requeue(keys, worker, true, [
          { token: (claimed as string[]).at(-1)!, clientId: 'c', priority: 0 },
          { token: t3, clientId: 'b', priority: 0, tracked: keys.tracked('p3') },
          { token: t2, clientId: 'a', priority: 0, tracked: keys.tracked('p1') },
          { token: t1, clientId: 'a', priority: 3, tracked: keys.tracked('p2') },
        ]);
      },
    },
    promoteTasks: {
      setup: (keys) => redis.zadd(keys.delayed, 1, entry('d1'), 2, entry('d2', 'a', 1, 4)),
      run: (keys) =>
        gateway.promote(keys, [
          { entry: entry('d1'), clientId: 'a', priority: 0 },
          { entry: entry('d2', 'a', 1, 4), clientId: 'a', priority: 4 },
        ]),
    },
    deadLetterDelayed: {
      setup: (keys) => redis.zadd(keys.delayed, 1, entry('d1')),
      run: (keys) => gateway.deadLetterDelayed(keys, entry('d1'), '{"reason":"expired"}', 10),
    },
    requeueDeadLetters: {
      setup: (keys) => redis.lpush(keys.deadLetters, '{"id":"x1"}', '{"id":"x2"}'),
      run: (keys) =>
        gateway.requeueDeadLetters(keys, [
          // x1 belongs to batch b1: its batch hears that it waits again.
          { raw: '{"id":"x1"}', clientId: 'a', entry: entry('x1', 'a', 0, 0, undefined, 'b1'), priority: 0 },
          { raw: '{"id":"x2"}', clientId: 'a', entry: entry('x2', 'a', 0, 2), priority: 2 },
        ]),
    },
    cancelTask: {
      // c1 is tracked and a task of batch b1 (a cancelled batch's task is removed by this script too).
      setup: (keys) => enqueue(keys, [{ id: 'c1', priority: 2, dedup: 'd1', track: true, batch: 'b1' }, { id: 'c2' }]),
      run: (keys) =>
        gateway.track.cancel(keys, {
          clientId: 'a',
          entry: entry('c1', 'a', 0, 2, undefined, 'b1'),
          priority: 2,
          deduplicationKey: 'd1',
          id: 'c1',
          track: true,
        }),
    },
    startTasks: {
      setup: async (keys) => {
        await enqueue(keys, [
          { id: 't1', priority: 2, dedup: 'd1', track: true },
          { id: 't2', client: 'b', track: true },
        ]);
        // t1 was asked to be cancelled while it was between places: its start cancels it.
        await redis.hset(keys.task('t1'), 'cancel', 'asked');
        return claimAll(keys, 2);
      },
      run: (keys, claimed) => {
        const [first, , second] = claimed as string[];
        return gateway.track.start(keys, worker, [
          { token: first, id: 't1', attempt: 1 },
          { token: second, id: 't2', attempt: 1 },
        ]);
      },
    },
    openBatch: {
      setup: () => Promise.resolve(),
      run: (keys) => gateway.batch.open(batchKeys(keys), { pattern: 'cb' }, { pattern: 'ok' }, 60_000),
    },
    addBatchChildren: {
      setup: (keys) => gateway.batch.open(batchKeys(keys), { pattern: 'cb' }, undefined, 60_000),
      run: (keys) => gateway.batch.add(batchKeys(keys), 'q', ['c1', 'c2']),
    },
    sealBatch: {
      // Every task settled (one dead) before the seal: the seal fires it.
      setup: (keys) => openBatchOf(keys, ['5', 'c1', 's', '6', 'c2', 'd']),
      run: (keys) => gateway.batch.seal(batchKeys(keys)),
    },
    foldBatch: {
      setup: async (keys) => {
        await openBatchOf(keys, []);
        await gateway.batch.seal(batchKeys(keys));
      },
      run: (keys) => gateway.batch.fold(batchKeys(keys), ['5', 'c1', 's', '6', 'c2', 'd', '7', 'x9', 's']),
    },
    closeBatch: {
      setup: async (keys) => {
        await openBatchOf(keys, ['5', 'c1', 's', '6', 'c2', 's']);
        await gateway.batch.seal(batchKeys(keys));
      },
      run: (keys) => gateway.batch.close(batchKeys(keys), ['batch.b1.complete']),
    },
    cancelBatch: {
      setup: async (keys) => {
        await openBatchOf(keys, []);
        await redis.sadd(batchKeys(keys).patterns, 'q');
      },
      run: (keys) => gateway.batch.cancel(batchKeys(keys)),
    },
    dropHeld: {
      setup: async (keys) => {
        await enqueue(keys, [{ id: 'b1c', client: 'd', batch: 'b1' }]);
        const [token] = await claimAll(keys, 2);
        return token;
      },
      run: (keys, token) => gateway.batch.dropHeld(keys, worker, token as string, 'b1'),
    },
    trimBatchEvents: {
      setup: (keys) => redis.rpush(keys.batchEvents, '1\nb1\nc1\ns', '2\nb1\nc2\nd', '3\nb1\nc3\ns'),
      run: (keys) => gateway.batch.trim(keys.batchEvents, ['1\nb1\nc1\ns', '2\nb1\nc2\nd']),
    },
    openFlow: {
      setup: () => Promise.resolve(),
      run: (keys) => openFlowOf(keys),
    },
    foldFlow: {
      // a succeeded and was marked enqueued: b and c are released; then b fails, which fails the flow.
      setup: async (keys) => {
        await openFlowOf(keys);
        await gateway.flow.mark(flowKeys(keys), 'released', ['a']);
      },
      run: (keys) =>
        gateway.flow.fold(flowKeys(keys), ['5', 'a', 's', '{"id":"flow.f1.a","response":1}', '6', 'x9', 's', '']),
    },
    markFlow: {
      setup: async (keys) => {
        await openFlowOf(keys);
        await gateway.flow.fold(flowKeys(keys), []);
      },
      run: (keys) => gateway.flow.mark(flowKeys(keys), 'released', ['a']),
    },
    countFlow: {
      setup: () => Promise.resolve(),
      run: (keys) => {
        const prefix = new PrefixKeys(keys.prefix);
        return gateway.flow.count(prefix.flowCounters, prefix.flowCounted('f1', '5', 'e'), 'succeeded', 60_000);
      },
    },
    cancelFlow: {
      setup: (keys) => openFlowOf(keys),
      run: (keys) => gateway.flow.cancel(flowKeys(keys), 'asked'),
    },
    startCoalesced: {
      setup: async (keys) => {
        // k1 runs; k2 waits for key k1 and k3 replaced its payload; a stray copy of k1's entry waits too.
        await coalesced(keys, { id: 'k1', mode: 'replace' }, [
          { id: 'k2', mode: 'replace' },
          { id: 'k3', mode: 'replace' },
        ]);
        await redis.rpush(keys.pending('c'), entry('k1', 'c', 0, 0, 'replace'));
        return claimAll(keys);
      },
      run: (keys, claimed) => {
        const [slot, , stale] = claimed as string[];
        return gateway.track.startCoalesced(keys, worker, [
          { token: slot, id: 'k2' },
          { token: stale, id: 'k1' },
        ]);
      },
    },
    revokeTask: {
      setup: (keys) => runningTracked(keys),
      run: (keys) => gateway.track.revoke(keys, 't1', 'stop', 'call-1'),
    },
    reportProgress: {
      setup: (keys) => runningTracked(keys),
      run: (keys, token) =>
        gateway.track.progress(keys, worker, {
          token: token as string,
          id: 't1',
          seq: 1,
          value: '{"done":1}',
          publish: { channel: 'chan', message: '{"id":"t1","seq":1,"progress":{"done":1}}' },
        }),
    },
    saveStep: {
      // A running task with a step saved already: the call saves the next one.
      setup: async (keys) => {
        const token = await runningTracked(keys);
        await gateway.steps.save(keys, worker, token, {
          taskId: 't1',
          what: 'result',
          name: 'a',
          value: '=1',
          keepMs: 60_000,
        });
        return token;
      },
      run: (keys, token) =>
        gateway.steps.save(keys, worker, token as string, {
          taskId: 't1',
          what: 'result',
          name: 'b',
          value: '={"b":2}',
          keepMs: 60_000,
        }),
    },
    heartbeatWorker: {
      setup: async (keys) => {
        await sound(keys);
        return claimAll(keys);
      },
      run: (keys, claimed) => gateway.heartbeat(keys, worker, 5_000, [(claimed as string[])[0]]),
    },
    forgetWorker: {
      setup: (keys) => redis.zadd(keys.workers, 1, worker),
      run: (keys) => gateway.forgetWorker(keys, worker, Date.now()),
    },
    releaseLock: {
      setup: (keys) => redis.set(keys.reaperLock, 'me'),
      run: (keys) => gateway.releaseReaperLock(keys, 'me'),
    },
    releaseThrottled: {
      setup: (keys) => redis.zadd(keys.throttled, 1, 'a'),
      run: (keys) => gateway.releaseThrottled(keys, Date.now()),
    },
    snapshotCounters: {
      setup: (keys) => redis.hset(keys.counters, 'completed', 3),
      run: (keys) => gateway.snapshotCounters(keys),
    },
    recordShardCount: {
      setup: async () => undefined,
      run: (keys) =>
        gateway.recordShardCount(new PrefixKeys(keys.root.slice(0, keys.root.indexOf(':{'))), keys.queue, 1),
    },
    rejoinClient: {
      setup: async (keys) => {
        await sound(keys);
        await redis.lrem(keys.ring, 0, 'a');
      },
      run: (keys) => gateway.rejoinClient(keys, 'a'),
    },
    readOverview: {
      setup: sound,
      run: (keys) => gateway.readOverview(keys, 10),
    },
    countUnreachable: {
      setup: sound,
      run: (keys) => gateway.sweeps.countUnreachable(keys, 10),
    },
    takeSweepTurn: {
      setup: async () => undefined,
      run: (keys) => gateway.sweeps.takeTurn(new PrefixKeys(keys.prefix), 'reaper-a', 1_000),
    },
    // The schedule scripts work on the prefix's schedule keys (`{%S}`), next to the queue's.
    changeSchedule: {
      setup: (keys) => storeSchedule(keys, 'existing'),
      run: (keys) => schedules.change(new PrefixKeys(keys.prefix).schedules, 'upsert', 'nightly', ...upsertArgs()),
    },
    claimSchedules: {
      setup: (keys) => storeSchedule(keys, 'nightly', 1),
      run: (keys) => schedules.take(new PrefixKeys(keys.prefix).schedules, 10),
    },
    advanceSchedule: {
      setup: async (keys) => {
        await storeSchedule(keys, 'nightly', 1);
        const [taken] = (await schedules.take(new PrefixKeys(keys.prefix).schedules, 10)).due;
        return taken;
      },
      run: (keys, taken) =>
        schedules.advance(
          new PrefixKeys(keys.prefix).schedules,
          taken as DueSchedule,
          '1',
          Date.now() + 60_000,
          '{"fired":1}',
        ),
    },
  };
}
