import { spawnSync } from 'node:child_process';
import { inspect } from 'node:util';
import { afterAll, describe, expect, it } from '@jest/globals';
import { InvalidOptionError, RedisTaskClient } from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { freePort } from '../../scripts/redis-server.mjs';
import { startProducer } from '../support/nest.js';
import { deleteKeys, openRedis, testPrefix } from '../support/redis.js';

const redis = openRedis();
const prefix = testPrefix('secrets');

afterAll(async () => {
  await deleteKeys(redis, prefix);
  await redis.quit();
});

describe('secrets and payloads never leave through errors', () => {
  it('names a bad connection option without echoing its password', () => {
    const error = (() => {
      try {
        new RedisTaskClient({ connection: 'http://admin:hunter2@cache.internal:6379' });
      } catch (caught) {
        return caught as InvalidOptionError;
      }
      throw new Error('the option was accepted');
    })();
    expect(error).toBeInstanceOf(InvalidOptionError);
    expect(error.message).toContain('option "connection"');
    expect(error.message).toContain('admin:***@cache.internal');
    expect(inspect(error)).not.toContain('hunter2');
  });

  it('keeps the password out of the CLI output when Redis is unreachable or the URL is mistyped', async () => {
    const port = await freePort();
    for (const url of [`redis://ops:hunter2@127.0.0.1:${port}`, 'redis//ops:hunter2@127.0.0.1']) {
      const result = spawnSync(process.execPath, ['.chaos-build/lib/cli/main.js', 'stats', '--url', url], {
        encoding: 'utf8',
        timeout: 20_000,
      });
      const output = `${result.stdout}${result.stderr}`;
      expect(output).toMatch(/nestjs-redis-tasks: /);
      expect(output).not.toContain('hunter2');
    }
  });

  it('drops the command arguments (the task entry, with its payload) from a Redis error an emit rejects with', async () => {
    const { client, module } = await startProducer(prefix);
    try {
      // A groups registry overwritten by a string: the enqueue script fails on its first read.
      await redis.set(new PrefixKeys(prefix).queue('secret.task').groups, 'broken');
      const error = await client.emitBatch('secret.task', [{ card: '4111-1111-1111-1111' }]).catch((e: unknown) => e);
      expect(String((error as Error).message)).toMatch(/^WRONGTYPE/);
      expect(inspect(error, { depth: 10 })).not.toContain('4111');
    } finally {
      await module.close();
    }
  });
});

describe('one rules gate for every task, whatever built it', () => {
  it('refuses hand-made RedisTaskRecords the builder would refuse, and far-future delays, with nothing written', async () => {
    const { RedisTaskRecord, InvalidTaskError } = await import('../../lib/index.js');
    const { client, module } = await startProducer(prefix);
    try {
      const bad: [string, object][] = [
        ['client id', { clientId: '' }],
        ['client id', { clientId: 42 }],
        ['client id', { clientId: 'a b' }],
        ['client id', { clientId: '{x}' }],
        ['maxAttempts', { maxAttempts: 0 }],
        ['backoff', { backoff: { type: 'weird' } }],
        ['at most 31622400000 (366 days)', { delayMs: 31_000 * 365 * 86_400_000 }],
        ['longest delay', { runAt: Date.now() + 31_000 * 365 * 86_400_000 }],
      ];
      for (const [named, options] of bad) {
        const error = await client
          .emitBatch('rules.task', [new RedisTaskRecord({ n: 1 }, options as never)])
          .catch((e: unknown) => e);
        expect(error).toBeInstanceOf(InvalidTaskError);
        expect(String((error as Error).message)).toContain(named);
      }
      await expect(client.emitBatch('x'.repeat(600), [{ n: 1 }])).rejects.toBeInstanceOf(InvalidTaskError);
      const queue = new PrefixKeys(prefix).queue('rules.task');
      expect(await redis.exists(queue.ring, queue.delayed)).toBe(0);
    } finally {
      await module.close();
    }
  });
});
