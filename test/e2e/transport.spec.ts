import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { Controller, Injectable, Module } from '@nestjs/common';
import { ClientsModule, Ctx, EventPattern, MessagePattern, Payload, RpcException } from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import { firstValueFrom } from 'rxjs';
import { encodeEntry } from '../../lib/core/model/codec.js';
import type { DeadLetterRecord } from '../../lib/core/model/dead-letter.js';
import {
  RedisTaskClient,
  RedisTaskContext,
  RedisTaskModule,
  RedisTaskRecordBuilder,
  ReplyTimeoutError,
  type RedisTaskInfo,
  type RedisTaskTransportOptions,
} from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { startProducer, startWorker, type Worker } from '../support/nest.js';
import { gatewayOf } from '../../lib/core/redis/gateway.js';
import { claimAs, clientList, deleteKeys, gate, openRedis, redisUrl, testPrefix, waitFor } from '../support/redis.js';
import { monitor } from '../support/monitor.js';

const redis = openRedis();
const seen: { pattern: string; payload: unknown; task: RedisTaskInfo }[] = [];
let hold = gate();

@Controller()
class Handlers {
  @EventPattern<string>('avatar.resize')
  async resize(@Payload() payload: { held?: boolean }, @Ctx() ctx: RedisTaskContext): Promise<void> {
    seen.push({ pattern: 'avatar.resize', payload, task: ctx.getTask() });
    // A held task keeps its slot until the test opens the gate.
    if (payload.held) await hold.promise;
  }

  @MessagePattern('invoice.render')
  render(@Payload() payload: { n: number }, @Ctx() ctx: RedisTaskContext): { doubled: number; clientId: string } {
    return { doubled: payload.n * 2, clientId: ctx.getClientId() };
  }

  @MessagePattern('invoice.fail')
  fail(): never {
    throw new RpcException('cannot render this invoice');
  }

  @EventPattern<string>('report.crash')
  crash(): never {
    throw new TypeError('report generator exploded');
  }

  @EventPattern<string>('slow.job')
  async slow(@Payload() payload: unknown, @Ctx() ctx: RedisTaskContext): Promise<void> {
    seen.push({ pattern: 'slow.job', payload, task: ctx.getTask() });
    await hold.promise;
  }
}

let prefix: string;
let keys: PrefixKeys;
const started: { close(): Promise<unknown> }[] = [];

/** The queue bases the last worker started has sent a claim for tasks to (its loops' first claims among them). */
let claimedFrom = new Set<string>();

async function worker(options: RedisTaskTransportOptions = {}): Promise<Worker> {
  // Its claims are watched from before it starts, so `listening` can tell when every loop made its first.
  const workerId = options.workerId ?? `w-${randomBytes(4).toString('hex')}`;
  const claims = new Set<string>();
  claimedFrom = claims;
  const watching = await monitor(redisUrl(), ({ args }) => {
    const command = args[0]?.toLowerCase();
    const asked = (command === 'eval' || command === 'evalsha') && args[2] === '1' && Number(args[4]) > 0;
    if (asked && args[5] === workerId) claims.add(args[3]);
  });
  started.push({ close: () => Promise.resolve(watching.stop()) });
  const w = await startWorker(prefix, [Handlers], { ...options, workerId });
  started.push(w.app);
  return w;
}

async function producer(options = {}): Promise<RedisTaskClient> {
  const { client, module } = await startProducer(prefix, options);
  started.push(module);
  return client;
}

function seenFor(pattern: string): typeof seen {
  return seen.filter((entry) => entry.pattern === pattern);
}

beforeAll(() => {
  seen.length = 0;
});

afterEach(async () => {
  hold.open();
  await Promise.all(started.splice(0).map((app) => app.close()));
  await deleteKeys(redis, prefix);
  seen.length = 0;
  hold = gate();
});

afterAll(async () => {
  await redis.quit();
});

function fresh(name: string): void {
  prefix = testPrefix(name);
  keys = new PrefixKeys(prefix);
}

/**
 * Waits until the last worker started waits for work on `count` patterns: each loop made its first claim
 * (an emit from now on reaches it as a wake-up), and its one subscriber connection listens for their wake
 * messages (an idle loop waits for them, sending nothing).
 */
async function listening(count: number): Promise<void> {
  await waitFor(() => claimedFrom.size === count, `the first claims of ${count} loops`);
  await waitFor(async () => {
    const channels = (await redis.pubsub('CHANNELS', `${prefix}:*:wake`)) as string[];
    const counts =
      channels.length === 0 ? [] : ((await redis.call('PUBSUB', 'NUMSUB', ...channels)) as (string | number)[]);
    return counts.filter((_, i) => i % 2 === 1 && Number(counts[i]) > 0).length === count;
  }, `the wake channels of ${count} patterns subscribed`);
}

/** The worker's connections to Redis, by name (`tasks:worker:<id>`, and its subscriber's `...:due`): name -> address. */
async function connectionsOf(workerId: string): Promise<Record<string, string>> {
  return Object.fromEntries(
    (await clientList(redis))
      .filter((client) => client.name.startsWith(`tasks:worker:${workerId}`))
      .map((client) => [client.name, client.addr]),
  );
}

/** Whether one of the worker's connections is blocked in BLPOP (other test files share this Redis, and their workers block too). */
async function blockedInBlpop(workerId: string): Promise<boolean> {
  return (await clientList(redis)).some(
    (client) => client.name.startsWith(`tasks:worker:${workerId}`) && client.cmd === 'blpop',
  );
}

/**
 * Records, with MONITOR, the connection each script run came from whose arguments after the script
 * (numkeys, KEYS, ARGV) start with `args`, `undefined` matching anything (a script is told by its layout:
 * MONITOR shows a first EVAL's source escaped).
 */
async function watchScripts(
  ...args: (string | undefined)[]
): Promise<{ sources: string[]; calls: string[][]; stop(): void }> {
  const sources: string[] = [];
  // Each run's arguments after the script: numkeys, KEYS, ARGV.
  const calls: string[][] = [];
  const watching = await monitor(redisUrl(), ({ source, args: argv }) => {
    const command = argv[0]?.toLowerCase();
    if (
      (command === 'eval' || command === 'evalsha') &&
      args.every((arg, i) => arg === undefined || argv[2 + i] === arg)
    ) {
      sources.push(source);
      calls.push(argv.slice(2));
    }
  });
  return { sources, calls, stop: () => watching.stop() };
}

describe('Nest version under test', () => {
  it('is the CommonJS Nest 11 under scripts/test-nest11.mjs, else the ESM Nest 12 the repository develops with', async () => {
    // A CommonJS package imported from ESM has a default export (module.exports); an ESM build has none.
    const nest = ['@nestjs/common', '@nestjs/core', '@nestjs/microservices', '@nestjs/testing'];
    const loaded = await Promise.all(nest.map((name) => import(name) as Promise<Record<string, unknown>>));
    expect(loaded.map((namespace) => 'default' in namespace)).toEqual(nest.map(() => process.env.NEST_MAJOR === '11'));
  });
});

describe('emit', () => {
  it('completes with the task id once Redis holds the task, and the handler receives it with its context', async () => {
    fresh('emit');
    const client = await producer({ clientId: 'api' });
    const { id } = await firstValueFrom(client.emit('avatar.resize', { userId: 7 }));
    expect(typeof id).toBe('string');
    expect(await redis.llen(keys.queue('avatar.resize').pending('api'))).toBe(1);

    await worker();
    await waitFor(() => seenFor('avatar.resize').length === 1, 'the handler to run');
    const [{ payload, task }] = seenFor('avatar.resize');
    expect(payload).toEqual({ userId: 7 });
    expect(task).toMatchObject({ id, pattern: 'avatar.resize', clientId: 'api', attempt: 1 });
    expect(task.enqueuedAt).toBeInstanceOf(Date);
    expect(task.signal.aborted).toBe(false);
    await waitFor(
      async () => (await redis.hlen(keys.queue('avatar.resize').processing(task.workerId))) === 0,
      'the ack',
    );
  });

  it('uses the client id of a record built with RedisTaskRecordBuilder', async () => {
    fresh('record');
    const client = await producer({ clientId: 'api' });
    await worker();
    await firstValueFrom(
      client.emit('avatar.resize', new RedisTaskRecordBuilder({ userId: 1 }).setClientId('tenant-42').build()),
    );
    await waitFor(() => seenFor('avatar.resize').length === 1, 'the handler to run');
    expect(seenFor('avatar.resize')[0]).toMatchObject({ payload: { userId: 1 }, task: { clientId: 'tenant-42' } });
  });

  it('wakes an idle worker by the push itself, long before its backstop would', async () => {
    fresh('wake');
    const client = await producer();
    const { transport } = await worker({ blockTimeoutMs: 120_000 });
    await listening(5);
    const emittedAt = Date.now();
    await firstValueFrom(client.emit('avatar.resize', { n: 1 }));
    await waitFor(() => seenFor('avatar.resize').length === 1, 'the handler to run', {
      timeoutMs: 10_000,
      intervalMs: 1,
    });
    expect(Date.now() - emittedAt).toBeLessThan(10_000);
    expect(transport.options.blockTimeoutMs).toBe(120_000);
  });

  it('holds three connections for its five patterns: idle loops wait on their bells together, a loop with work blocks on the one blocking connection with its claim behind', async () => {
    fresh('wakeclaim');
    const client = await producer();
    const { transport } = await worker({ blockTimeoutMs: 120_000 });
    const { workerId } = transport.options;
    await listening(5);
    const names = [`tasks:worker:${workerId}`, `tasks:worker:${workerId}:due`, `tasks:worker:${workerId}:wait`];
    await waitFor(async () => Object.keys(await connectionsOf(workerId)).length === 3, 'its three connections');
    const connections = await connectionsOf(workerId);
    expect(Object.keys(connections).sort()).toEqual(names);
    const queue = keys.queue('avatar.resize');
    /** The connection the claim that took the pattern's next task came from. */
    const claimedOn = async (n: number): Promise<string> => {
      const claims = await watchScripts('1', queue.base, undefined, workerId); // claimTasks: its base, any number wanted, the worker id
      try {
        await firstValueFrom(client.emit('avatar.resize', { n }));
        await waitFor(() => seenFor('avatar.resize').length === n && claims.sources.length > 0, `task ${n} to run`);
        return claims.sources[0];
      } finally {
        claims.stop();
      }
    };
    // No loop has had work yet: together they wait in one BLPOP of their bells on the blocking connection (BellWatch);
    // the token of a push wakes the loop of its shard, which claims on the command connection.
    await waitFor(() => blockedInBlpop(workerId), 'the idle loops to watch their bells');
    expect(await claimedOn(1)).toBe(connections[names[0]]);
    // Its wait brought a task: its next wait holds the blocking connection, BLPOP of its bell with the claim
    // pipelined behind.
    await waitFor(() => blockedInBlpop(workerId), 'the loop blocked in BLPOP');
    expect(await claimedOn(2)).toBe(connections[names[2]]);
  });

  it('claims once per task when tasks come one at a time: the claim that took the last waiting task sends the loop straight back to its wait', async () => {
    fresh('oneclaim');
    const client = await producer();
    const { transport } = await worker({ blockTimeoutMs: 120_000 });
    const { workerId } = transport.options;
    await listening(5);
    const queue = keys.queue('avatar.resize');
    // claimTasks calls of this queue that asked for tasks (ARGV[1] > 0; acknowledgements alone ask for none).
    let claims = 0;
    const watching = await monitor(redisUrl(), ({ args }) => {
      const command = args[0]?.toLowerCase();
      if (
        (command === 'eval' || command === 'evalsha') &&
        args[2] === '1' &&
        args[3] === queue.base &&
        args[5] === workerId &&
        Number(args[4]) > 0
      )
        claims++;
    });
    try {
      for (let n = 1; n <= 5; n++) {
        await firstValueFrom(client.emit('avatar.resize', { n }));
        await waitFor(() => seenFor('avatar.resize').length === n, `task ${n} to run`);
        await waitFor(async () => (await redis.hlen(queue.processing(workerId))) === 0, `task ${n} acknowledged`);
      }
      // One claim per task, each made when the task's wake message came; an empty claim after each task
      // would make 10.
      expect(claims).toBe(5);
    } finally {
      watching.stop();
    }
  });

  it("at concurrency 1, claims tasks that came together one call each, each carrying the last one's acknowledgement (none goes alone)", async () => {
    fresh('burst1');
    const client = await producer();
    const { transport } = await worker({ blockTimeoutMs: 120_000, concurrency: 1 });
    const { workerId } = transport.options;
    await listening(5);
    const queue = keys.queue('avatar.resize');
    // claimTasks calls of this queue and worker (numkeys 1, the base, tasks wanted, the worker id): those
    // asking for tasks, and those sending acknowledgements alone.
    const watching = await watchScripts('1', queue.base, undefined, workerId);
    const wanted = () => watching.calls.map(([, , asked]) => Number(asked));
    try {
      await client.emitBatch(
        'avatar.resize',
        Array.from({ length: 6 }, (_, n) => ({ n })),
      );
      await waitFor(() => seenFor('avatar.resize').length === 6, 'the six tasks to run');
      await waitFor(async () => (await redis.hlen(queue.processing(workerId))) === 0, 'every task acknowledged');
      await listening(5);
      // The woken claim takes the first; each next claim carries the acknowledgement of the task before it,
      // the last one included (that claim finds nothing left). Right after the wake-up the loop used to
      // claim at once with no slot free: the first task's acknowledgement went alone, then a claim.
      expect(wanted().filter((asked) => asked === 0)).toHaveLength(0);
      expect(wanted().filter((asked) => asked > 0).length).toBeLessThanOrEqual(8);
    } finally {
      watching.stop();
    }
  });

  it('returns what a woken claim took with no free slot to its queue, uncounted, and runs it later', async () => {
    fresh('giveback');
    const client = await producer();
    const { transport } = await worker({ blockTimeoutMs: 120_000, concurrency: 1 });
    const { workerId } = transport.options;
    // Every loop waits, its claim to ask for the one free slot.
    await listening(5);
    // requeueTasks of either queue
    const requeues = await watchScripts(
      undefined,
      keys.queue('avatar.resize').processing(workerId),
      keys.queue('avatar.resize').ring,
    );
    const slowRequeues = await watchScripts(
      undefined,
      keys.queue('slow.job').processing(workerId),
      keys.queue('slow.job').ring,
    );
    // The task goes back in one call sent at once; a read of the processing hash first (a sweep's way) let
    // the loop's next claim overtake it and run a later task before it.
    const processingKeys = new Set([
      keys.queue('slow.job').processing(workerId),
      keys.queue('avatar.resize').processing(workerId),
    ]);
    let reads = 0;
    const readsWatch = await monitor(redisUrl(), ({ args }) => {
      if (args[0]?.toLowerCase() === 'hgetall' && processingKeys.has(args[1])) reads++;
    });
    try {
      // Both loops wake and both claims take a task; only one task gets the slot, and keeps it (both are
      // held: a task that ended at once would free the slot for the other claim, whichever answers first).
      await Promise.all([
        firstValueFrom(client.emit('slow.job', { n: 1 })),
        firstValueFrom(client.emit('avatar.resize', { n: 2, held: true })),
      ]);
      await waitFor(
        () => requeues.sources.length + slowRequeues.sources.length === 1,
        'the task with no slot to go back',
      );
      expect(reads).toBe(0);
      hold.open();
      await waitFor(
        () => seenFor('slow.job').length === 1 && seenFor('avatar.resize').length === 1,
        'both handlers to run',
      );
      expect(seen.map(({ task }) => task.attempt)).toEqual([1, 1]);
      await waitFor(async () => (await redis.hlen(keys.queue('avatar.resize').processing(workerId))) === 0, 'the ack');
      expect(await redis.llen(keys.queue('avatar.resize').pending('default'))).toBe(0);
      expect(await redis.llen(keys.queue('slow.job').pending('default'))).toBe(0);
    } finally {
      requeues.stop();
      slowRequeues.stop();
      readsWatch.stop();
    }
  });

  it('loses nothing when a worker closes as a task wakes it', async () => {
    fresh('closewake');
    const client = await producer();
    for (let round = 0; round < 10; round++) {
      const w = await worker({ blockTimeoutMs: 120_000 });
      const { workerId } = w.transport.options;
      await listening(5);
      const emitted = firstValueFrom(client.emit('avatar.resize', { round }));
      await w.app.close();
      await emitted;
      const queue = keys.queue('avatar.resize');
      expect(await redis.hlen(queue.processing(workerId))).toBe(0);
      expect(await redis.zscore(queue.workers, workerId)).toBeNull();
    }
    // Every task either ran before its worker closed or waits in its list.
    const pending = await redis.llen(keys.queue('avatar.resize').pending('default'));
    expect(pending + seenFor('avatar.resize').length).toBe(10);
  });

  it('keeps tasks for a pattern no worker handles, untouched, until one does', async () => {
    fresh('nohandler');
    const client = await producer({ clientId: 'api' });
    await worker();
    await firstValueFrom(client.emit('nobody.handles.this', { n: 1 }));
    await firstValueFrom(client.emit('avatar.resize', { n: 2 }));
    await waitFor(() => seenFor('avatar.resize').length === 1, 'the handled pattern to run');
    expect(await redis.llen(keys.queue('nobody.handles.this').pending('api'))).toBe(1);
  });

  it('refuses a payload over maxPayloadBytes and writes nothing', async () => {
    fresh('oversize');
    const client = await producer({ maxPayloadBytes: 100, clientId: 'api' });
    await expect(firstValueFrom(client.emit('avatar.resize', { blob: 'x'.repeat(200) }))).rejects.toThrow(
      /maxPayloadBytes/,
    );
    expect(await redis.exists(keys.queue('avatar.resize').pending('api'))).toBe(0);
  });
});

describe('send', () => {
  it('returns the @MessagePattern handler result', async () => {
    fresh('send');
    const client = await producer({ clientId: 'billing' });
    await worker();
    await expect(firstValueFrom(client.send('invoice.render', { n: 21 }))).resolves.toEqual({
      doubled: 42,
      clientId: 'billing',
    });
  });

  it('delivers the handler error to the caller, and the task goes to dead letters', async () => {
    fresh('senderr');
    const client = await producer();
    await worker({ maxAttempts: 1 });
    await expect(firstValueFrom(client.send('invoice.fail', { n: 1 }))).rejects.toMatchObject({
      message: 'cannot render this invoice',
    });
    const [record] = (await redis.lrange(keys.queue('invoice.fail').deadLetters, 0, -1)).map(
      (raw) => JSON.parse(raw) as DeadLetterRecord,
    );
    expect(record).toMatchObject({ reason: 'failed', pattern: 'invoice.fail', payload: { n: 1 }, attempts: 1 });
  });

  it('fails with ReplyTimeoutError when no worker answers within replyTimeoutMs', async () => {
    fresh('timeout');
    const client = await producer({ replyTimeoutMs: 200 });
    await expect(firstValueFrom(client.send('invoice.render', { n: 1 }))).rejects.toBeInstanceOf(ReplyTimeoutError);
    // Each caller waits its own full timeout, never less (a later caller is not timed out with an earlier one).
    const timedOutAfter = async (): Promise<number> => {
      const start = performance.now();
      await expect(firstValueFrom(client.send('invoice.render', { n: 2 }))).rejects.toBeInstanceOf(ReplyTimeoutError);
      return performance.now() - start;
    };
    const first = timedOutAfter();
    await new Promise((resolve) => setTimeout(resolve, 120));
    const waited = await Promise.all([first, timedOutAfter()]);
    for (const ms of waited) expect(ms).toBeGreaterThanOrEqual(199);
  });

  it('answers a caller whose task was enqueued before any worker started', async () => {
    fresh('sendlate');
    const client = await producer();
    const reply = firstValueFrom(client.send('invoice.render', { n: 5 }));
    await waitFor(async () => (await redis.llen(keys.queue('invoice.render').pending('default'))) === 1, 'the enqueue');
    await worker();
    await expect(reply).resolves.toEqual({ doubled: 10, clientId: 'default' });
  });
});

describe('failures and bad input', () => {
  it("records the handler's own error (not Nest's generic message) in dead letters", async () => {
    fresh('crash');
    const client = await producer();
    await worker({ maxAttempts: 1 });
    await firstValueFrom(client.emit('report.crash', { day: 1 }));
    const deadLetters = keys.queue('report.crash').deadLetters;
    const raw = await waitFor(async () => (await redis.lrange(deadLetters, 0, -1))[0], 'a dead letter');
    expect(JSON.parse(raw)).toMatchObject({
      reason: 'failed',
      error: { name: 'TypeError', message: 'report generator exploded' },
      payload: { day: 1 },
    });
    expect((JSON.parse(raw) as DeadLetterRecord).error?.stack).toContain('report generator exploded');
  });

  it('moves a malformed entry to dead letters with reason "malformed" and keeps working', async () => {
    fresh('malformed');
    const client = await producer({ clientId: 'api' });
    const queue = keys.queue('avatar.resize');
    await redis.rpush(queue.pending('api'), 'this is not a task', '0|{"id":"no-client","payload":1}');
    await redis.rpush(queue.ring, 'api');
    await firstValueFrom(client.emit('avatar.resize', { good: true }));
    await worker();
    await waitFor(() => seenFor('avatar.resize').length === 1, 'the good task to run');
    const records = await waitFor(async () => {
      const list = await redis.lrange(queue.deadLetters, 0, -1);
      return list.length === 2 ? list.map((raw) => JSON.parse(raw) as DeadLetterRecord) : undefined;
    }, 'two dead letters');
    expect(records.map((record) => record.reason)).toEqual(['malformed', 'malformed']);
    expect(records.map((record) => record.raw).sort()).toEqual([
      '0|{"id":"no-client","payload":1}',
      'this is not a task',
    ]);
    expect(records.every((record) => typeof record.detail === 'string' && record.detail.length > 0)).toBe(true);
    expect(seenFor('avatar.resize')[0].payload).toEqual({ good: true });
  });

  it('dead-letters an entry of another format version with reason "unsupported-version", never running it, and keeps working', async () => {
    fresh('version');
    const client = await producer({ clientId: 'api' });
    const queue = keys.queue('avatar.resize');
    const future =
      '0|{"v":3,"id":"from-the-future","clientId":"api","enqueuedAt":1,"payload":{"good":false},"renamedField":1}';
    await redis.rpush(queue.pending('api'), future);
    await redis.rpush(queue.ring, 'api');
    await firstValueFrom(client.emit('avatar.resize', { good: true }));
    await worker();
    await waitFor(() => seenFor('avatar.resize').length === 1, 'the good task to run');
    const [record] = await waitFor(async () => {
      const list = await redis.lrange(queue.deadLetters, 0, -1);
      return list.length === 1 ? list.map((raw) => JSON.parse(raw) as DeadLetterRecord) : undefined;
    }, 'one dead letter');
    expect(record).toMatchObject({
      id: 'from-the-future',
      reason: 'unsupported-version',
      raw: future,
      detail: expect.stringContaining('format version 3'),
    });
    expect(seenFor('avatar.resize').map((task) => task.payload)).toEqual([{ good: true }]);
    expect(await redis.hgetall(queue.counters)).toMatchObject({ deadLettered: '1' });
    expect(await redis.hget(queue.counters, 'failed')).toBeNull();
  });
});

describe('restarts lose nothing', () => {
  it('processes tasks emitted while no worker ran', async () => {
    fresh('offline');
    const client = await producer();
    await client.emitBatch(
      'avatar.resize',
      Array.from({ length: 50 }, (_, n) => ({ n })),
    );
    await worker();
    await waitFor(() => seenFor('avatar.resize').length === 50, 'all 50 tasks');
    expect(new Set(seenFor('avatar.resize').map((entry) => (entry.payload as { n: number }).n)).size).toBe(50);
  });

  it('close() returns unfinished tasks without counting an attempt; a new app with the same id runs them', async () => {
    fresh('restart');
    const client = await producer();
    const first = await worker({ workerId: 'stable-1', concurrency: 3, shutdownTimeoutMs: 50 });
    await client.emitBatch('slow.job', [{ n: 1 }, { n: 2 }, { n: 3 }, { n: 4 }]);
    await waitFor(() => seenFor('slow.job').length === 3, 'three handlers running');
    const queue = keys.queue('slow.job');
    expect(await redis.hlen(queue.processing('stable-1'))).toBe(3);

    await first.app.close(); // handlers still hang: their tasks go back to the head of the list
    expect(await redis.hlen(queue.processing('stable-1'))).toBe(0);
    expect(await redis.llen(queue.pending('default'))).toBe(4);
    expect(await redis.zscore(queue.workers, 'stable-1')).toBeNull();

    hold.open();
    seen.length = 0;
    await worker({ workerId: 'stable-1', concurrency: 3 });
    await waitFor(() => seenFor('slow.job').length === 4, 'all four tasks after the restart');
    expect(seenFor('slow.job').map((entry) => entry.task.attempt)).toEqual([1, 1, 1, 1]);
    expect(
      seenFor('slow.job')
        .map((entry) => (entry.payload as { n: number }).n)
        .sort(),
    ).toEqual([1, 2, 3, 4]);
  });

  it('a worker restarted with the same id first resumes what its processing hash still holds (crash)', async () => {
    fresh('resume');
    const client = await producer();
    await client.emitBatch('avatar.resize', [{ n: 1 }, { n: 2 }]);
    const queue = keys.queue('avatar.resize');
    // A previous run of "crashed-1" claimed both tasks and died without settling them.
    await gatewayOf(redis).heartbeat(queue, 'crashed-1', 30_000);
    const claimed = await claimAs(redis, queue, 'crashed-1', 2);
    expect(claimed).toHaveLength(4);
    expect(await redis.llen(queue.ring)).toBe(0);

    await worker({ workerId: 'crashed-1' });
    await waitFor(() => seenFor('avatar.resize').length === 2, 'both resumed tasks');
    expect(seenFor('avatar.resize').map((entry) => entry.task.attempt)).toEqual([2, 2]);
    expect(seenFor('avatar.resize').map((entry) => (entry.payload as { n: number }).n)).toEqual([1, 2]);
  });
});

describe('module wiring', () => {
  it('injects a client from RedisTaskModule.forRootAsync', async () => {
    fresh('async');
    @Injectable()
    class Config {
      readonly url = redisUrl();
    }
    @Module({ providers: [Config], exports: [Config] })
    class ConfigModule {}
    const module = await Test.createTestingModule({
      imports: [
        RedisTaskModule.forRootAsync({
          imports: [ConfigModule],
          inject: [Config],
          useFactory: (config: Config) => ({ connection: config.url, prefix, clientId: 'from-factory' }),
        }),
      ],
    }).compile();
    await module.init();
    started.push(module);
    await worker();
    const client = module.get(RedisTaskClient);
    await expect(firstValueFrom(client.send('invoice.render', { n: 2 }))).resolves.toEqual({
      doubled: 4,
      clientId: 'from-factory',
    });
  });

  it('works as a customClass of ClientsModule.register', async () => {
    fresh('clients');
    const module = await Test.createTestingModule({
      imports: [
        ClientsModule.register([
          { name: 'TASKS', customClass: RedisTaskClient, options: { connection: redisUrl(), prefix } },
        ]),
      ],
    }).compile();
    await module.init();
    started.push(module);
    await worker();
    const client = module.get<RedisTaskClient>('TASKS');
    expect(client).toBeInstanceOf(RedisTaskClient);
    await expect(firstValueFrom(client.send('invoice.render', { n: 3 }))).resolves.toEqual({
      doubled: 6,
      clientId: 'default',
    });
  });

  it('leaves no key behind for an emitted task once it is handled', async () => {
    fresh('clean');
    const client = await producer();
    const w = await worker();
    await client.emitBatch(
      'avatar.resize',
      Array.from({ length: 20 }, (_, n) => ({ n })),
    );
    await waitFor(() => seenFor('avatar.resize').length === 20, 'all tasks');
    const queue = keys.queue('avatar.resize');
    await waitFor(async () => (await redis.hlen(queue.processing(w.transport.options.workerId))) === 0, 'all acks');
    expect(
      await redis.exists(queue.pending('default'), queue.ring, queue.processing(w.transport.options.workerId)),
    ).toBe(0);
  });
});

describe('encoded entries written by hand are runnable', () => {
  it('runs an entry written with the codec directly', async () => {
    fresh('manual');
    const queue = keys.queue('avatar.resize');
    await redis.rpush(
      queue.pending('ops'),
      encodeEntry({ id: 'manual-1', clientId: 'ops', payload: { by: 'hand' }, enqueuedAt: Date.now() }),
    );
    await redis.rpush(queue.ring, 'ops');
    await worker();
    await waitFor(() => seenFor('avatar.resize').length === 1, 'the task');
    expect(seenFor('avatar.resize')[0].task).toMatchObject({ id: 'manual-1', clientId: 'ops' });
  });
});
