import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller, type Type } from '@nestjs/common';
import { Ctx, EventPattern } from '@nestjs/microservices';
import { firstValueFrom } from 'rxjs';
import { RedisTaskContext } from '../../lib/index.js';
import { TaskAdmin } from '../../lib/core/admin/admin.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { monitor, type Monitor, type MonitoredCommand } from '../support/monitor.js';
import { startProducer, startWorker } from '../support/nest.js';
import {
  clientList,
  deleteKeys,
  openRedis,
  redisUrl,
  scriptNamesBySha,
  testPrefix,
  waitFor,
} from '../support/redis.js';

/**
 * What an idle deployment asks of Redis: the periodic sweep is taken in turn by its processes rather than
 * repeated by each, and a worker with no schedule due checks for none until one is stored.
 */
const redis = openRedis();
const started: { close(): Promise<unknown> }[] = [];
const monitors: Monitor[] = [];
let prefix = '';
const runs: string[] = [];

@Controller()
class Quiet {
  @EventPattern<string>('quiet.tick')
  tick(@Ctx() ctx: RedisTaskContext): void {
    runs.push(ctx.getTaskId());
  }
}

/** A controller with a handler for each of `count` patterns (`many.0` ...). */
function manyPatterns(count: number): Type {
  @Controller()
  class Many {}
  for (let n = 0; n < count; n++) {
    const key = `h${n}`;
    Object.defineProperty(Many.prototype, key, { value: () => undefined, writable: true, configurable: true });
    EventPattern(`many.${n}`)(Many.prototype, key, Object.getOwnPropertyDescriptor(Many.prototype, key)!);
  }
  return Many;
}

afterEach(async () => {
  for (const watching of monitors.splice(0)) watching.stop();
  await Promise.all(started.splice(0).map((app) => app.close()));
  await deleteKeys(redis, prefix);
  runs.length = 0;
});

afterAll(async () => {
  await redis.quit();
});

/** How many connections are subscribed to `channel`. */
async function subscribers(channel: string): Promise<number> {
  return Number(((await redis.pubsub('NUMSUB', channel)) as [string, number])[1]);
}

/** Every command MONITOR shows from now on, for the test to count. */
async function watch(): Promise<MonitoredCommand[]> {
  const seen: MonitoredCommand[] = [];
  monitors.push(await monitor(redisUrl(), (command) => seen.push(command)));
  return seen;
}

/** The checks for due schedules (claimSchedules calls) of this test's prefix among `seen`. */
function scheduleChecks(seen: readonly MonitoredCommand[]): number {
  const names = scriptNamesBySha();
  return seen.filter(
    ({ args }) =>
      args[0].toLowerCase() === 'evalsha' &&
      names.get(args[1]) === 'claimSchedules' &&
      args[3]?.startsWith(`${prefix}:`),
  ).length;
}

/**
 * With nothing due, 3 s without a check for due schedules; then a schedule stored fires its first tick (300 ms
 * on) at once, heard rather than found by a backstop check.
 */
async function expectQuietThenFired(admin: TaskAdmin): Promise<void> {
  await sleep(300);
  const seen = await watch();
  await sleep(3_000);
  expect(scheduleChecks(seen)).toBe(0);
  await admin.upsertSchedule('soon', { pattern: 'quiet.tick', everyMs: 300 });
  await waitFor(() => runs.some((id) => id.startsWith('soon@')), 'the first tick of the stored schedule', {
    timeoutMs: 5_000,
  });
  expect(scheduleChecks(seen)).toBeGreaterThan(0);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

describe('the quiet path (real Redis)', () => {
  it('three processes of one deployment sweep in turn: about one sweep per interval, not one per process; the others rarely ask, and take over when the sweeping ones stop', async () => {
    prefix = testPrefix('quiet-sweep');
    const intervalMs = 200;
    const apps: { close(): Promise<unknown> }[] = [];
    for (const workerId of ['w1', 'w2', 'w3']) {
      const worker = await startWorker(prefix, [Quiet], { workerId, reaperIntervalMs: intervalMs });
      started.push(worker.app);
      apps.push(worker.app);
    }
    const workers = new PrefixKeys(prefix).queue('quiet.tick').workers;
    const names = scriptNamesBySha();
    // Past the start (each process's first turn requests).
    await sleep(1_000);
    const seen = await watch();
    const windowMs = 4_000;
    await sleep(windowMs);
    // Each sweep of the queue reads its workers' leases once (a plain command, not inside a script).
    const sweepsOf = (commands: readonly MonitoredCommand[]) =>
      commands.filter(
        ({ source, args }) => source !== 'lua' && args[0].toLowerCase() === 'zrangebyscore' && args[1] === workers,
      ).length;
    const ticks = windowMs / intervalMs;
    // Each process alone would sweep 20 times: 60 for the three. In turn: about 20 (a late timer on a loaded
    // machine makes it fewer, never more than one per turn).
    expect(sweepsOf(seen)).toBeGreaterThanOrEqual(2);
    expect(sweepsOf(seen)).toBeLessThanOrEqual(Math.ceil((ticks / 0.9) * 1.2) + 1);
    // Turn requests: one per tick from the process sweeping; the two others, finding its turn under way, let
    // 1, 2, 4, then 8 ticks pass between theirs (at most 5 each in 20 ticks). Every process asking at every
    // tick would be 60.
    const requests = seen.filter(
      ({ args }) => args[0].toLowerCase() === 'evalsha' && names.get(args[1]) === 'takeSweepTurn',
    ).length;
    expect(requests).toBeLessThanOrEqual(Math.ceil(ticks * 1.2) + 2 * 6);
    // Two of the three stop (the one sweeping among them, or not): the last one takes the turns over within
    // nine of its ticks, and sweeps at every tick from then on.
    const stopping = apps.slice(0, 2);
    started.splice(0, started.length, ...started.filter((app) => !stopping.includes(app)));
    await Promise.all(stopping.map((app) => app.close()));
    const after = await watch();
    await waitFor(() => sweepsOf(after) >= 3, 'the last process sweeping', { timeoutMs: 9 * intervalMs + 3_000 });
  });

  it('a worker with no schedule due checks for none, and fires a schedule stored later at its first tick', async () => {
    prefix = testPrefix('quiet-sched');
    const worker = await startWorker(prefix, [Quiet], { workerId: 'w1' });
    started.push(worker.app);
    // The admin API alone (a module's RedisTaskReaper, which fires schedules too, is the next test's).
    const admin = TaskAdmin.forPrefix(redis, prefix);
    await admin.upsertSchedule('nightly', { pattern: 'quiet.tick', cron: '0 3 * * *' });
    // The upsert woke the ticker once; after that nothing is due before 03:00.
    await expectQuietThenFired(admin);
  });

  it("a module's RedisTaskReaper with no schedule due checks for none, and fires a schedule stored later at its first tick", async () => {
    prefix = testPrefix('quiet-module-sched');
    // The module's reaper fires schedules; the worker only runs their tasks (it fires none itself).
    const { module } = await startProducer(prefix);
    started.push(module);
    const worker = await startWorker(prefix, [Quiet], { workerId: 'w1', scheduleCheckMs: false });
    started.push(worker.app);
    const admin = TaskAdmin.forPrefix(redis, prefix);
    await admin.upsertSchedule('nightly', { pattern: 'quiet.tick', cron: '0 3 * * *' });
    // Heard once the reaper subscribed (its ticker checked then): after that nothing is due before 03:00.
    await waitFor(
      async () => (await redis.pubsub('NUMSUB', new PrefixKeys(prefix).schedules.changed))[1] === 1,
      'the reaper to subscribe',
    );
    await expectQuietThenFired(admin);
  });

  it("an idle shard costs the ring audit no SCAN; a count the clients' lists disagree with starts one pass, not one per sweep", async () => {
    prefix = testPrefix('quiet-audit');
    const worker = await startWorker(prefix, [Quiet], { workerId: 'w1', reaperIntervalMs: 100 });
    started.push(worker.app);
    const queue = new PrefixKeys(prefix).queue('quiet.tick');
    const names = scriptNamesBySha();
    const seen = await watch();
    const isScan = ({ args }: MonitoredCommand) =>
      args[0].toLowerCase() === 'scan' && args.some((arg) => arg.startsWith(queue.base));
    const isCheck = ({ args }: MonitoredCommand) =>
      args[0].toLowerCase() === 'evalsha' && names.get(args[1]) === 'countUnreachable' && args[3] === queue.base;
    // Ten sweeps of an idle shard: one count check each, no SCAN.
    await waitFor(() => seen.filter(isCheck).length >= 10, 'ten audit checks');
    expect(seen.filter(isScan)).toHaveLength(0);
    // A count edited by hand (no client holds these 5 tasks): a pass over the keys (as many SCAN steps as
    // the database needs) finds nothing to put back, and the same gap starts no other pass: ten checks in a
    // row then come without a SCAN between them (passes one after another would leave none).
    await redis.set(queue.pendingCount, '5');
    await waitFor(() => seen.some(isScan), 'a pass over the shard');
    await waitFor(
      () => {
        let quiet = 0;
        for (const command of seen) {
          if (isScan(command)) quiet = 0;
          else if (isCheck(command)) quiet++;
        }
        return quiet >= 10;
      },
      'ten checks in a row without a SCAN after the pass',
      { timeoutMs: 60_000 },
    );
  });

  it('an idle worker of 30 patterns: one backstop claim per blockTimeoutMs, a heartbeat of its first shard per interval (the rest less often), and a sweep of 10 shards per turn that covers all', async () => {
    prefix = testPrefix('quiet-many');
    const patterns = 30;
    const worker = await startWorker(prefix, [manyPatterns(patterns)], {
      workerId: 'w1',
      blockTimeoutMs: 200,
      heartbeatIntervalMs: 100,
      leaseMs: 1_000,
      reaperIntervalMs: 100,
    });
    started.push(worker.app);
    const keys = new PrefixKeys(prefix);
    const workersKeys = new Map(
      Array.from({ length: patterns }, (_, n) => [keys.queue(`many.${n}`).workers, n] as const),
    );
    const names = scriptNamesBySha();
    // Past the start (its first claims and the first sweep of every pattern).
    await sleep(500);
    const seen = await watch();
    const windowMs = 3_000;
    await sleep(windowMs);
    const calls = (script: string) =>
      seen.filter(({ args }) => args[0].toLowerCase() === 'evalsha' && names.get(args[1]) === script);
    const claims = calls('claimTasks').length;
    const beats = calls('heartbeatWorker');
    const swept = seen.filter(
      ({ source, args }) => source !== 'lua' && args[0].toLowerCase() === 'zrangebyscore' && workersKeys.has(args[1]),
    );
    // Each loop on its own would claim every 200 ms: 30 * 15 = 450 in the window. Shared: about 15.
    expect(claims).toBeLessThanOrEqual(60);
    // Every shard every 100 ms would be 30 * 30 = 900 beats. The first shard each beat (30), the 29 others
    // a beat before their lease would end (every 900 ms): about 130.
    const first = keys.queue('many.0').workers;
    expect(beats.filter(({ args }) => args[3] === first).length).toBeGreaterThanOrEqual(10);
    expect(beats.length).toBeLessThanOrEqual(450);
    // Every pattern swept in the window, 10 per turn: about 30 turns * 10 = 300 (all 30 each turn: 900).
    expect(new Set(swept.map(({ args }) => args[1])).size).toBe(patterns);
    expect(swept.length).toBeLessThanOrEqual(450);
  });

  it('idle processes of one pattern hear no wake message: their loops wait on the bell, which wakes one per push', async () => {
    prefix = testPrefix('quiet-unheard');
    for (const workerId of ['w1', 'w2', 'w3', 'w4']) {
      started.push((await startWorker(prefix, [Quiet], { workerId })).app);
    }
    const { client, module } = await startProducer(prefix);
    started.push(module);
    const keys = new PrefixKeys(prefix).queue('quiet.tick');
    // Every process subscribed (its control channel), none to the wake channel: a push wakes no process but the one its bell does.
    await waitFor(async () => (await subscribers(keys.controlChannel)) === 4, 'the four workers to subscribe');
    expect(await subscribers(keys.wakeChannel)).toBe(0);
    for (let n = 1; n <= 5; n++) {
      await firstValueFrom(client.emit('quiet.tick', { n }));
      await waitFor(() => runs.length === n, `task ${n} to run`);
    }
    expect(await subscribers(keys.wakeChannel)).toBe(0);
  });

  it('a task sent to four idle worker processes wakes one of them: about one claim per task, not one per process', async () => {
    prefix = testPrefix('quiet-bell');
    for (const workerId of ['w1', 'w2', 'w3', 'w4']) {
      started.push((await startWorker(prefix, [Quiet], { workerId })).app);
    }
    const { client, module } = await startProducer(prefix);
    started.push(module);
    const base = new PrefixKeys(prefix).queue('quiet.tick').base;
    const names = scriptNamesBySha();
    // Past the start: every process's loop waits (on its bell).
    await sleep(500);
    const seen = await watch();
    const tasks = 30;
    for (let n = 1; n <= tasks; n++) {
      await firstValueFrom(client.emit('quiet.tick', { n }));
      await waitFor(() => runs.length === n, `task ${n} to run`);
    }
    // claimTasks calls of this queue that asked for tasks (ARGV[1] > 0; acknowledgements alone ask for none).
    const claims = seen.filter(
      ({ args }) =>
        args[0].toLowerCase() === 'evalsha' &&
        names.get(args[1]) === 'claimTasks' &&
        args[3] === base &&
        Number(args[4]) > 0,
    ).length;
    // Woken by a message, each of the four would claim: about 4 per task.
    expect(claims).toBeLessThanOrEqual(Math.ceil(tasks * 1.2));
  });
  it('a task sent to four idle worker processes of five patterns wakes one of them: their idle loops wait on their bells together, and a wake message a watch covers wakes none', async () => {
    prefix = testPrefix('quiet-watch');
    for (const workerId of ['w1', 'w2', 'w3', 'w4']) {
      started.push((await startWorker(prefix, [Quiet, manyPatterns(4)], { workerId })).app);
    }
    const { client, module } = await startProducer(prefix);
    started.push(module);
    const keys = new PrefixKeys(prefix).queue('quiet.tick');
    const names = scriptNamesBySha();
    // Every process hears the wake channel (its loops share one blocking connection), and each blocks on the bells.
    await waitFor(async () => (await subscribers(keys.wakeChannel)) === 4, 'the four workers to subscribe');
    await waitFor(
      async () => (await clientList(redis)).filter((c) => c.name.endsWith(':wait') && c.cmd === 'blpop').length >= 4,
      'the four processes to watch their bells',
    );
    const seen = await watch();
    const tasks = 30;
    for (let n = 1; n <= tasks; n++) {
      await firstValueFrom(client.emit('quiet.tick', { n }));
      await waitFor(() => runs.length === n, `task ${n} to run`);
    }
    const claims = seen.filter(
      ({ args }) =>
        args[0].toLowerCase() === 'evalsha' &&
        names.get(args[1]) === 'claimTasks' &&
        args[3] === keys.base &&
        Number(args[4]) > 0,
    ).length;
    // Woken by the message, each of the four would claim: about 4 per task.
    expect(claims).toBeLessThanOrEqual(Math.ceil(tasks * 1.2));
  });

  it('a process of five patterns whose watched bell comes to hold another type (a stray write) runs its task at the end of that watch, then by its messages', async () => {
    prefix = testPrefix('quiet-watch-broken');
    const keys = new PrefixKeys(prefix).queue('quiet.tick');
    started.push((await startWorker(prefix, [Quiet, manyPatterns(4)], { workerId: 'w1', blockTimeoutMs: 60_000 })).app);
    const { client, module } = await startProducer(prefix);
    started.push(module);
    await waitFor(
      async () => (await clientList(redis)).some((c) => c.name === 'tasks:worker:w1:wait' && c.cmd === 'blpop'),
      'the watch',
    );
    // The watch blocks on the bell; a stray SET makes it a string. The push finds it so and rings nothing; its
    // message is left unheeded (the watch covers the loop). The watch ends at its hold, the next finds the bell
    // broken: every loop it covered claims once, and from then on they wait for their messages.
    await redis.set(keys.bell, 'stray');
    await firstValueFrom(client.emit('quiet.tick', { n: 1 }));
    await waitFor(() => runs.length === 1, 'the task to run (the backstop is a minute)');
    for (let n = 2; n <= 4; n++) {
      await firstValueFrom(client.emit('quiet.tick', { n }));
      await waitFor(() => runs.length === n, `task ${n} to run, by its message`, { timeoutMs: 3_000 });
    }
  });

  it('a process of five patterns whose watch connection is cut runs the next task still, and watches again', async () => {
    prefix = testPrefix('quiet-watch-cut');
    started.push((await startWorker(prefix, [Quiet, manyPatterns(4)], { workerId: 'w1', blockTimeoutMs: 60_000 })).app);
    const { client, module } = await startProducer(prefix);
    started.push(module);
    const watching = async () =>
      (await clientList(redis)).find((c) => c.name === 'tasks:worker:w1:wait' && c.cmd === 'blpop');
    await waitFor(async () => (await watching()) !== undefined, 'the watch');
    const first = await watching();
    await redis.client('KILL', 'ID', first!.id);
    await firstValueFrom(client.emit('quiet.tick', { n: 1 }));
    await waitFor(
      () => runs.length === 1,
      'the task to run (by its message, or the watch again: the backstop is a minute)',
    );
    await waitFor(async () => {
      const again = await watching();
      return again !== undefined && again.id !== first!.id;
    }, 'a new watch on the reconnected connection');
  });
});
