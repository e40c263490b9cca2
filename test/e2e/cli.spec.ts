import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { EventPattern, Payload } from '@nestjs/microservices';
import { firstValueFrom } from 'rxjs';
import {
  DEAD_LETTER_REASONS,
  NonRetryableTaskError,
  RedisTaskAdmin,
  RedisTaskRecordBuilder,
  type QueueStats,
} from '../../lib/index.js';
import { freePort } from '../../scripts/redis-server.mjs';
import { startProducer, startWorker } from '../support/nest.js';
import { deleteKeys, openRedis, redisUrl, testPrefix, waitFor } from '../support/redis.js';

// The CLI as the build emits it (the global setup compiles lib/ with tsc, as `npm run build` does).
const CLI = '.chaos-build/lib/cli/main.js';
const redis = openRedis();
const started: { close(): Promise<unknown> }[] = [];
let prefix = '';
const handled: string[] = [];
let failing = true;

@Controller()
class Handlers {
  @EventPattern<string>('cli.work')
  work(@Payload() payload: { key: string }): void {
    if (failing && payload.key.startsWith('bad')) throw new NonRetryableTaskError(`cannot handle ${payload.key}`);
    handled.push(payload.key);
  }
}

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function cli(args: string[], env: Record<string, string | undefined> = { REDIS_URL: redisUrl() }): Promise<Run> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { env: { PATH: process.env.PATH, ...env } }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, stdout, stderr });
    });
  });
}

/** A run's JSON output; a run that failed throws with its exit code and what it printed on stderr. */
function output(run: Run): unknown {
  if (run.code !== 0) throw new Error(`the CLI exited with ${run.code}: ${run.stderr.trim()}`);
  return JSON.parse(run.stdout);
}

afterEach(async () => {
  await Promise.all(started.splice(0).map((app) => app.close()));
  await deleteKeys(redis, prefix);
  handled.length = 0;
  failing = true;
});

afterAll(async () => {
  await redis.quit();
});

async function setup() {
  prefix = testPrefix('cli');
  const { client, module } = await startProducer(prefix);
  started.push(module);
  started.push((await startWorker(prefix, [Handlers])).app);
  return client;
}

describe('npx nestjs-redis-tasks', () => {
  it('is the package bin, built from lib/cli/main.ts', () => {
    const pkg = JSON.parse(readFileSync('package.json', 'utf8')) as { bin: Record<string, string> };
    expect(pkg.bin['nestjs-redis-tasks']).toBe('./dist/cli/main.js');
    expect(existsSync(CLI)).toBe(true);
    expect(readFileSync('lib/cli/main.ts', 'utf8').startsWith('#!/usr/bin/env node\n')).toBe(true);
  });

  it('reports the stats of a known state, as a table and as JSON', async () => {
    const client = await setup();
    await client.emitBatch('cli.work', [
      new RedisTaskRecordBuilder({ key: 'later-1' }).setClientId('acme').setDelay(60_000).build(),
      new RedisTaskRecordBuilder({ key: 'bad-1' }).setClientId('acme').build(),
    ]);
    await waitFor(async () => (await redis.llen(`${prefix}:{cli.work}:dead`)) === 1, 'the dead letter');
    const human = await cli(['stats', '--prefix', prefix]);
    expect(human.code).toBe(0);
    expect(human.stdout).toMatch(/^pattern\s+pending\s+in flight\s+delayed\s+dead/m);
    expect(human.stdout).toMatch(/^cli\.work\s+0\s+0\s+1\s+1\s/m);
    const detail = await cli(['stats', 'cli.work', '--prefix', prefix, '--json']);
    expect(detail.code).toBe(0);
    const stats = output(detail) as QueueStats;
    expect(stats).toMatchObject({
      queue: 'cli.work',
      delayed: 1,
      deadLetters: 1,
      pending: { total: 0 },
      counters: { deadLettered: 1, failed: 1 },
    });
    const workers = output(await cli(['workers', 'cli.work', '--prefix', prefix, '--json'])) as { alive: boolean }[];
    expect(workers).toHaveLength(1);
    expect(workers[0].alive).toBe(true);
    expect(human.stdout).toMatch(/^cli\.work\s.*\srunning\s*$/m);
    expect(stats).toMatchObject({ state: 'running', workers: { registered: 1, alive: 1 } });
  });

  it('says `no worker` for a pattern no live worker consumes, as the dashboard does, and `paused` when paused', async () => {
    const client = await setup();
    await firstValueFrom(client.emit('cli.work', { key: 'ok-1' }));
    await waitFor(() => handled.includes('ok-1'), 'the task handled');
    await Promise.all(started.splice(0).map((app) => app.close())); // the worker deregisters: none is left
    await client.close();
    const human = await cli(['stats', '--prefix', prefix]);
    expect(human.stdout).toMatch(/^cli\.work\s.*\sno worker\s*$/m);
    expect((await cli(['stats', 'cli.work', '--prefix', prefix])).stdout).toMatch(
      /^pattern cli\.work: no worker, 1 shard\(s\), 0 live worker\(s\) of 0 registered$/m,
    );
    expect((await cli(['pause', 'cli.work', '--prefix', prefix])).code).toBe(0);
    expect((await cli(['stats', '--prefix', prefix])).stdout).toMatch(/^cli\.work\s.*\spaused\s*$/m);
  });

  it('lists in --help every dead-letter reason there is, from the one list', async () => {
    const help = await cli(['--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain(`--reason ${DEAD_LETTER_REASONS.join('|')},`);
    for (const reason of DEAD_LETTER_REASONS) expect(help.stdout).toContain(reason);
  });

  it('lists a dead letter, shows it, and requeues it by id so that it completes', async () => {
    const client = await setup();
    const { id } = await firstValueFrom(client.emit('cli.work', { key: 'bad-2' }));
    await waitFor(async () => (await redis.llen(`${prefix}:{cli.work}:dead`)) === 1, 'the dead letter');
    const list = await cli(['dead', 'list', 'cli.work', '--prefix', prefix, '--json']);
    expect(output(list)).toMatchObject([{ id, reason: 'failed', error: { message: 'cannot handle bad-2' } }]);
    const table = await cli(['dead', 'list', 'cli.work', '--prefix', prefix]);
    expect(table.stdout).toContain(`${id}  default  failed`);
    const shown = await cli(['dead', 'show', 'cli.work', id, '--prefix', prefix]);
    expect(output(shown)).toMatchObject({ id, payload: { key: 'bad-2' } });
    failing = false;
    const requeued = await cli(['dead', 'requeue', 'cli.work', id, '--prefix', prefix]);
    expect(requeued).toMatchObject({ code: 0, stdout: 'requeued 1 dead letter(s) of cli.work\n' });
    await waitFor(() => handled.includes('bad-2'), 'the requeued task to complete');
    expect(await redis.llen(`${prefix}:{cli.work}:dead`)).toBe(0);
  });

  it('selects dead letters by filter: reason, client and error text', async () => {
    const client = await setup();
    await client.emitBatch('cli.work', [
      new RedisTaskRecordBuilder({ key: 'bad-x' }).setClientId('x').build(),
      new RedisTaskRecordBuilder({ key: 'bad-y' }).setClientId('y').build(),
      new RedisTaskRecordBuilder({ key: 'bad-y2' }).setClientId('y').build(),
    ]);
    await waitFor(async () => (await redis.llen(`${prefix}:{cli.work}:dead`)) === 3, 'three dead letters');
    const listed = output(await cli(['dead', 'list', 'cli.work', '--client', 'y', '--prefix', prefix, '--json'])) as {
      clientId: string;
    }[];
    expect(listed.map((r) => r.clientId)).toEqual(['y', 'y']);
    const purged = await cli(['dead', 'purge', 'cli.work', '--client', 'y', '--error', 'bad-y2', '--prefix', prefix]);
    expect(purged).toMatchObject({ code: 0, stdout: 'purged 1 dead letter(s) of cli.work\n' });
    failing = false;
    expect((await cli(['dead', 'requeue', 'cli.work', '--reason', 'failed', '--prefix', prefix])).stdout).toBe(
      'requeued 2 dead letter(s) of cli.work\n',
    );
    await waitFor(() => handled.includes('bad-x') && handled.includes('bad-y'), 'the requeued tasks');
    const bad = await cli(['dead', 'purge', 'cli.work', '--reason', 'broken', '--prefix', prefix]);
    expect(bad).toMatchObject({
      code: 2,
      stderr: expect.stringMatching(
        /^nestjs-redis-tasks: --reason must be one of failed, timeout, interrupted, expired, malformed, unsupported-version, rejected, got "broken" \(see --help\)\n$/,
      ),
    });
    expect((await cli(['dead', 'purge', 'cli.work', 'some-id', '--all', '--prefix', prefix])).code).toBe(2);
  });

  it('lists the consumer groups of a pattern and removes one, reporting what it deleted', async () => {
    await setup(); // its worker registers the implicit group "default"
    started.push((await startWorker(prefix, [Handlers], { group: 'audit' })).app);
    expect(output(await cli(['groups', 'cli.work', '--prefix', prefix, '--json']))).toEqual(['audit', 'default']);
    const removed = await cli(['groups', 'remove', 'cli.work', 'audit', '--prefix', prefix, '--json']);
    expect(output(removed)).toEqual({ pending: 0, delayed: 0, inFlight: 0, deadLetters: 0 });
    expect((await cli(['groups', 'cli.work', '--prefix', prefix])).stdout).toBe('default\n');
    expect((await cli(['stats', 'cli.work', '--group', 'bad:name', '--prefix', prefix])).code).toBe(2);
  });

  it('pauses and resumes a pattern', async () => {
    const client = await setup();
    expect((await cli(['pause', 'cli.work', '--prefix', prefix])).stdout).toBe('cli.work: paused\n');
    await firstValueFrom(client.emit('cli.work', { key: 'while-paused' }));
    expect(output(await cli(['stats', 'cli.work', '--prefix', prefix, '--json']))).toMatchObject({
      paused: true,
      pending: { total: 1 },
    });
    expect((await cli(['resume', 'cli.work', '--prefix', prefix])).code).toBe(0);
    await waitFor(() => handled.includes('while-paused'), 'the task after resume');
  });

  it('lists, pauses, resumes, triggers and removes recurring schedules, as tables and as JSON', async () => {
    const client = await setup();
    await client.connect();
    const admin = new RedisTaskAdmin(client);
    await admin.upsertSchedule('nightly', {
      pattern: 'cli.work',
      cron: '0 3 * * *',
      tz: 'Europe/Berlin',
      payload: { key: 'nightly' },
    });
    const listed = await cli(['schedules', '--prefix', prefix]);
    expect(listed.stdout).toMatch(/nightly\s+cli\.work\s+cron 0 3 \* \* \* \(Europe\/Berlin\)\s+active/);
    expect((await cli(['schedules', 'pause', 'nightly', '--prefix', prefix])).stdout).toBe(
      'schedule nightly: paused\n',
    );
    expect(output(await cli(['schedules', 'list', '--prefix', prefix, '--json']))).toMatchObject([
      { id: 'nightly', paused: true, nextTicks: [] },
    ]);
    expect((await cli(['schedules', 'resume', 'nightly', '--prefix', prefix])).code).toBe(0);
    const triggered = output(await cli(['schedules', 'trigger', 'nightly', '--prefix', prefix, '--json'])) as {
      fired: boolean;
      taskId: string;
    };
    expect(triggered.fired).toBe(true);
    await waitFor(() => handled.includes('nightly'), 'the triggered task');
    expect((await cli(['schedules', 'remove', 'nightly', '--prefix', prefix])).stdout).toBe(
      'schedule nightly: removed\n',
    );
    const missing = await cli(['schedules', 'trigger', 'nightly', '--prefix', prefix]);
    expect(missing.code).toBe(4);
    expect(missing.stderr).toBe('nestjs-redis-tasks: no schedule "nightly" (schedules list shows them)\n');
  });

  it('shows and cancels a tracked task by id (exit 4 for an unknown one)', async () => {
    await setup();
    const { client, module } = await startProducer(prefix, { track: true });
    started.push(module);
    const receipt = await firstValueFrom(
      client.emit<{ id: string }>('cli.work', new RedisTaskRecordBuilder({ key: 'later' }).setDelay(60_000).build()),
    );
    const shown = await cli(['task', 'show', 'cli.work', receipt.id, '--prefix', prefix]);
    expect(shown.stdout.startsWith(`task: ${receipt.id} of "cli.work" (group default)\nstate: delayed\n`)).toBe(true);
    expect(shown.stdout).toMatch(/\nwhy: delay\n/);
    expect(output(await cli(['task', 'show', 'cli.work', receipt.id, '--prefix', prefix, '--json']))).toMatchObject({
      state: 'delayed',
      id: receipt.id,
    });
    expect(
      (await cli(['task', 'cancel', 'cli.work', receipt.id, '--prefix', prefix, '--reason', 'not now'])).stdout,
    ).toBe(`task ${receipt.id}: cancelled (it was delayed)\n`);
    expect(output(await cli(['task', 'show', 'cli.work', receipt.id, '--prefix', prefix, '--json']))).toMatchObject({
      state: 'cancelled',
      reason: 'not now',
    });
    expect((await cli(['task', 'cancel', 'cli.work', receipt.id, '--prefix', prefix])).stdout).toBe(
      `task ${receipt.id}: not cancelled, it had already ended (cancelled)\n`,
    );
    const missing = await cli(['task', 'show', 'cli.work', 'nope', '--prefix', prefix]);
    expect(missing.code).toBe(4);
    expect(missing.stderr).toMatch(/no tracked task nope on "cli.work"/);
    expect((await cli(['task', 'show', 'cli.work', '--prefix', prefix])).code).toBe(2);
  });

  it('shows and cancels a batch by id (exit 4 for an unknown one)', async () => {
    await setup();
    const { client, module } = await startProducer(prefix);
    started.push(module);
    const batch = client.batch({ id: 'cli-batch', onComplete: { pattern: 'cli.work' } });
    await batch.add('cli.work', [
      new RedisTaskRecordBuilder({ key: 'b1' }).setDelay(60_000).build(),
      new RedisTaskRecordBuilder({ key: 'b2' }).setDelay(60_000).build(),
    ]);
    const shown = await cli(['batch', 'show', 'cli-batch', '--prefix', prefix]);
    expect(shown.stdout).toMatch(
      /^batch: cli-batch \(open\)\ntasks: 2: 2 pending, 0 succeeded, 0 failed, 0 cancelled\ncallback: waiting\n/,
    );
    expect((await cli(['batch', 'cancel', 'cli-batch', '--prefix', prefix])).stdout).toBe(
      'batch cli-batch: cancelled (it was open); 2 waiting task(s) removed, 0 running stopped\n',
    );
    expect(output(await cli(['batch', 'show', 'cli-batch', '--prefix', prefix, '--json']))).toMatchObject({
      state: 'cancelled',
      total: 2,
    });
    const missing = await cli(['batch', 'show', 'nope', '--prefix', prefix]);
    expect(missing.code).toBe(4);
    expect(missing.stderr).toMatch(/no batch nope/);
    expect((await cli(['batch', 'show', '--prefix', prefix])).code).toBe(2);
  });

  it('shows and cancels a flow by id (exit 4 for an unknown one)', async () => {
    await setup();
    const { client, module } = await startProducer(prefix);
    started.push(module);
    await client.flow({
      id: 'cli-flow',
      nodes: [
        { id: 'a', pattern: 'cli.unworked', payload: { key: 'f1' } },
        { id: 'b', pattern: 'cli.unworked', payload: { key: 'f2' }, deps: ['a'], onParentFailure: 'skip' },
      ],
    });
    const shown = await cli(['flow', 'show', 'cli-flow', '--prefix', prefix]);
    expect(shown.stdout).toMatch(
      /^flow: cli-flow \(running\)\ncreated: [\dT:.Z-]+\nnodes: 2\n {2}a \[released\] cli\.unworked\n {2}b \[waiting\] cli\.unworked after a \(skip\)\n$/,
    );
    expect((await cli(['flow', 'cancel', 'cli-flow', '--reason', 'not today', '--prefix', prefix])).stdout).toBe(
      'flow cli-flow: cancelled; 1 released node(s) being stopped, its waiting ones cancelled\n',
    );
    expect(output(await cli(['flow', 'show', 'cli-flow', '--prefix', prefix, '--json']))).toMatchObject({
      state: 'cancelled',
      reason: 'cancelled (not today)',
      ended: true,
    });
    expect((await cli(['flow', 'cancel', 'cli-flow', '--prefix', prefix])).stdout).toBe(
      'flow cli-flow: not cancelled, it ended cancelled\n',
    );
    const missing = await cli(['flow', 'show', 'nope', '--prefix', prefix]);
    expect(missing.code).toBe(4);
    expect(missing.stderr).toMatch(/no flow nope/);
    expect((await cli(['flow', 'show', '--prefix', prefix])).code).toBe(2);
  });

  it.each([
    [['frobnicate'], 2, /^nestjs-redis-tasks: unknown command "frobnicate" \(see --help\)\n$/],
    [['stats', '--bogus'], 2, /^nestjs-redis-tasks: Unknown option '--bogus'.*\(see --help\)\n$/],
    [
      ['stats', 'no.such.pattern', '--prefix', 'cli-none'],
      3,
      /^nestjs-redis-tasks: unknown pattern "no\.such\.pattern" \(known: none; is --prefix right\?\)\n$/,
    ],
    [
      ['stats', '--url', 'http://example.com'],
      2,
      /^nestjs-redis-tasks: --url must be a redis:\/\/ or rediss:\/\/ URL, got "http:\/\/example\.com"\n$/,
    ],
    [['dead', 'requeue', 'cli.work'], 3, /unknown pattern/],
  ])('fails %j with exit code %i and one line, no stack', async (args, code, message) => {
    const run = await cli(args);
    expect(run.code).toBe(code);
    expect(run.stderr).toMatch(message);
    expect(run.stderr).not.toMatch(/\n\s+at /);
  });

  it('fails with exit code 1 and one line when Redis cannot be reached', async () => {
    const port = await freePort();
    const run = await cli(['stats', '--url', `redis://127.0.0.1:${port}`]);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(
      new RegExp(`^nestjs-redis-tasks: cannot reach Redis at redis://127\\.0\\.0\\.1:${port}: .+\\n$`),
    );
  });

  it('exits 4 for a dead letter id that does not exist', async () => {
    await setup();
    const run = await cli(['dead', 'show', 'cli.work', 'nope', '--prefix', prefix]);
    expect(run).toMatchObject({ code: 4, stderr: 'nestjs-redis-tasks: no dead letter with id "nope" in cli.work\n' });
  });
});
