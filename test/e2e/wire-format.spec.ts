import { execFile, execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { Ctx, EventPattern, Payload } from '@nestjs/microservices';
import { readScriptDefinitions } from '../../lib/core/redis/scripts.js';
import { RedisTaskContext } from '../../lib/index.js';
import { PrefixKeys, type QueueKeys } from '../../lib/core/redis/keys.js';
import { startRedisServer, type RedisServer } from '../../scripts/redis-server.mjs';
import { startWorker } from '../support/nest.js';
import { deleteKeys, newestDeadLetter, openRedis, redisUrl, testPrefix, waitFor } from '../support/redis.js';

const run = promisify(execFile);
const root = process.cwd();
const doc = readFileSync(join(root, 'docs', 'WIRE-FORMAT.md'), 'utf8');
const script = join(root, 'docs', 'enqueue.lua');
const redis = openRedis();
const runs: { id: string; clientId: string; attempt: number; payload: unknown }[] = [];

@Controller()
class Mail {
  @EventPattern<string>('mail.{send}')
  send(@Payload() payload: unknown, @Ctx() ctx: RedisTaskContext): void {
    runs.push({ id: ctx.getTaskId(), clientId: ctx.getClientId(), attempt: ctx.getAttempt(), payload });
  }
}

/** `redis-cli` as a user would type it from the document: no Node code on the producer side. */
async function redisCli(...args: string[]): Promise<string> {
  return redisCliAt(redisUrl(), ...args);
}

async function redisCliAt(url: string, ...args: string[]): Promise<string> {
  const { stdout } = await run('redis-cli', ['-u', url, ...args]);
  return stdout.trim();
}

function entry(envelope: Record<string, unknown>): string {
  return `0|${JSON.stringify(envelope)}`;
}

let prefix = '';
const started: { close(): Promise<unknown> }[] = [];

afterEach(async () => {
  await Promise.all(started.splice(0).map((app) => app.close()));
  await deleteKeys(redis, prefix);
  runs.length = 0;
});

afterAll(async () => {
  await redis.quit();
});

describe('docs/WIRE-FORMAT.md', () => {
  it('is enough to enqueue with redis-cli alone: each task runs once, in priority order, with its client id; another version is dead-lettered', async () => {
    prefix = testPrefix('wire');
    // The document's steps: the root with the pattern encoded, the script, SADD of the pattern.
    const pattern = 'mail.{send}';
    const rootKey = `${prefix}:{mail.%7Bsend%7D}`;
    const now = String(Date.now());
    const plain = entry({
      v: 1,
      id: 'cli-low',
      clientId: 'tenant-42',
      enqueuedAt: Number(now),
      payload: { to: 'low' },
    });
    const urgent = entry({
      v: 1,
      id: 'cli-high',
      clientId: 'tenant-42',
      enqueuedAt: Number(now),
      priority: 5,
      payload: { to: 'high' },
    });
    const future = entry({ v: 3, id: 'cli-v3', clientId: 'tenant-7', enqueuedAt: Number(now), payload: { to: 'v3' } });
    expect(await redisCli('--eval', script, rootKey, ',', 'tenant-42', plain)).toBe('0');
    expect(
      await redisCli(
        '--eval',
        script,
        rootKey,
        ',',
        '',
        'tenant-42',
        urgent,
        '5',
        '0',
        'mail:high',
        '60000',
        'cli-high',
        'tenant-7',
        future,
      ),
    ).toBe('0\n0');
    expect(await redisCli('SADD', `${prefix}:queues`, pattern)).toBe('1');
    // The same deduplication key again: refused, answered with the holder's id.
    expect(
      await redisCli(
        '--eval',
        script,
        rootKey,
        ',',
        '',
        'tenant-42',
        urgent.replace('cli-high', 'cli-dup'),
        '5',
        '0',
        'mail:high',
        '60000',
        'cli-dup',
      ),
    ).toBe('cli-high');

    const worker = await startWorker(prefix, [Mail], { concurrency: 1 });
    started.push(worker.app);
    const keys = new PrefixKeys(prefix).queue(pattern);
    expect(keys.root).toBe(rootKey);
    const dead = await newestDeadLetter(redis, keys);
    expect(dead).toMatchObject({ id: 'cli-v3', reason: 'unsupported-version', raw: future });
    await waitFor(
      async () =>
        (await redis.hget(keys.counters, 'completed')) === '2' &&
        (await redis.hlen(keys.processing(worker.transport.options.workerId))) === 0,
      'both tasks acknowledged',
    );
    expect(runs).toEqual([
      { id: 'cli-high', clientId: 'tenant-42', attempt: 1, payload: { to: 'high' } },
      { id: 'cli-low', clientId: 'tenant-42', attempt: 1, payload: { to: 'low' } },
    ]);
    expect(await redis.llen(keys.pending('tenant-42'))).toBe(0);
  });

  it('ships the same enqueue as a Redis Function: FUNCTION LOAD once, then FCALL (on a server of its own)', async () => {
    const server: RedisServer = await startRedisServer();
    try {
      const url = server.url;
      prefix = testPrefix('wire-fcall');
      // As the document says: redis-cli -x FUNCTION LOAD REPLACE < functions.lua
      const loaded = execFileSync('redis-cli', ['-u', url, '-x', 'FUNCTION', 'LOAD', 'REPLACE'], {
        input: readFileSync(join(root, 'docs', 'functions.lua')),
      });
      expect(loaded.toString().trim()).toBe('nestjs_redis_tasks_v1');
      const task = entry({
        v: 1,
        id: 'fcall-1',
        clientId: 'tenant-9',
        enqueuedAt: Date.now(),
        payload: { to: 'fcall' },
      });
      expect(
        await redisCliAt(
          url,
          'FCALL',
          'nestjs_redis_tasks_enqueue_v1',
          '1',
          `${prefix}:{mail.%7Bsend%7D}`,
          'tenant-9',
          task,
        ),
      ).toBe('0');
      const worker = await startWorker(prefix, [Mail], { connection: url });
      started.push(worker.app);
      await waitFor(() => runs.length === 1, 'the task enqueued by FCALL to run');
      expect(runs).toEqual([{ id: 'fcall-1', clientId: 'tenant-9', attempt: 1, payload: { to: 'fcall' } }]);
      await Promise.all(started.splice(0).map((app) => app.close()));
    } finally {
      await server.stop();
    }
  });

  it('ships the enqueue script the library itself runs', () => {
    const library = readScriptDefinitions().find((definition) => definition.fileName === 'enqueueTasks-1.lua');
    const shipped = readFileSync(script, 'utf8');
    expect(library).toBeDefined();
    expect(shipped.endsWith(library?.source ?? '-')).toBe(true);
  });

  it('names every key of a queue as the code spells it', () => {
    const keys = new PrefixKeys('tasks').queue('p');
    const named = (key: string): string => key.replace(keys.root, '<root>');
    const spelled: string[] = [];
    for (const value of Object.values(keys) as unknown[]) {
      if (typeof value === 'string' && value.startsWith(`${keys.root}:`))
        spelled.push(named(value).replace(/^<root>:(?!groups)/, '<base>:'));
    }
    const byMethod = (key: string): string => named(key).replace(/^<root>:(pending|priority|processing)/, '<base>:$1');
    spelled.push(
      byMethod(keys.pending('<client>')),
      byMethod(keys.priority('<client>')),
      byMethod(keys.processing('<worker id>')),
    );
    spelled.push(
      named(keys.dedup('<key>')),
      named(keys.result('<task id>')),
      named(keys.dueChannel),
      keys.controlChannel.replace(keys.root, '<base>'),
    );
    const missing = spelled.filter((key) => !doc.includes(`\`${key}\``) && !doc.includes(`\`${key}\`,`));
    expect(missing).toEqual([]);
    expect(spelled.length).toBeGreaterThan(25);
    expect((keys satisfies QueueKeys).base).toBe(keys.root);
  });
});
