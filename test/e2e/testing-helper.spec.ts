import { describe, expect, it } from '@jest/globals';
import { Controller, Injectable } from '@nestjs/common';
import { EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { firstValueFrom } from 'rxjs';
import { InvalidOptionError, PrefixInUseError, RedisTaskRecordBuilder } from '../../lib/index.js';
import { createRedisTaskTestingApp, deleteRedisTaskPrefix } from '../../lib/testing.js';
import { keysUnder, openRedis, redisUrl } from '../support/redis.js';

@Injectable()
class Mailer {
  readonly sent: string[] = [];
  send(to: string): Promise<void> {
    this.sent.push(to);
    return Promise.resolve();
  }
}

@Controller()
class MailController {
  constructor(private readonly mailer: Mailer) {}

  @EventPattern<string>('mail.send')
  async send(@Payload() payload: { to: string }): Promise<void> {
    await new Promise((resolve) => setTimeout(resolve, 5));
    await this.mailer.send(payload.to);
  }

  @MessagePattern<string>('mail.count')
  count(): number {
    return this.mailer.sent.length;
  }
}

describe('createRedisTaskTestingApp (nestjs-redis-tasks/testing)', () => {
  it("runs a user's handlers with their providers, drains, replies, and closes leaving no key behind", async () => {
    const tasks = await createRedisTaskTestingApp({
      connection: redisUrl(),
      controllers: [MailController],
      providers: [Mailer],
    });
    for (const to of ['a@example.com', 'b@example.com', 'c@example.com']) {
      await firstValueFrom(tasks.client.emit('mail.send', { to }));
    }
    await tasks.drain('mail.send');
    expect(tasks.module.get(Mailer).sent.sort()).toEqual(['a@example.com', 'b@example.com', 'c@example.com']);
    expect(await firstValueFrom(tasks.client.send('mail.count', {}))).toBe(3);
    await tasks.close();
    const redis = openRedis();
    try {
      expect(await keysUnder(redis, tasks.prefix)).toEqual([]);
    } finally {
      await redis.quit();
    }
  });

  it('lets a test override a provider, and reports what is left when tasks do not drain in time', async () => {
    const tasks = await createRedisTaskTestingApp({
      connection: redisUrl(),
      controllers: [MailController],
      providers: [Mailer],
      configure: (builder) =>
        builder.overrideProvider(Mailer).useValue({ sent: [], send: () => new Promise(() => undefined) }),
      transport: { shutdownTimeoutMs: 0 },
    });
    try {
      await firstValueFrom(tasks.client.emit('mail.send', { to: 'stuck@example.com' }));
      await expect(tasks.drain('mail.send', 300)).rejects.toThrow(
        /did not drain within 300 ms \(mail\.send: 0 pending, 1 in flight, 0 delayed\)/,
      );
    } finally {
      await tasks.close();
    }
  });
});

describe('deleting one prefix: RedisTaskAdmin.deletePrefix() and deleteRedisTaskPrefix()', () => {
  it('refuses while a worker of the prefix is alive (nothing deleted), then deletes its keys and no other prefix', async () => {
    const tasks = await createRedisTaskTestingApp({
      connection: redisUrl(),
      controllers: [MailController],
      providers: [Mailer],
      transport: { group: 'audit' },
    });
    const redis = openRedis();
    // Neighbours that share the text of the prefix: another prefix under it, and one that extends it.
    const neighbours = [
      `${tasks.prefix}:eu:{mail.send}:ring`,
      `${tasks.prefix}:eu:queues`,
      `${tasks.prefix}x:{mail.send}:ring`,
      `${tasks.prefix}x:queues`,
    ];
    try {
      for (const key of neighbours) await redis.set(key, 'keep');
      await firstValueFrom(tasks.client.emit('mail.send', { to: 'a@example.com' }));
      await tasks.drain('mail.send');
      await firstValueFrom(
        tasks.client.emit(
          'mail.send',
          new RedisTaskRecordBuilder({ to: 'later@example.com' }).setDelay(60_000).build(),
        ),
      );
      const before = (await keysUnder(redis, tasks.prefix)).sort();
      const ours = before.filter((key) => key === `${tasks.prefix}:queues` || key.startsWith(`${tasks.prefix}:{`));
      expect(ours.filter((key) => key.includes(':g:audit:')).length).toBeGreaterThan(3);

      const refused = await tasks.admin.deletePrefix().catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(PrefixInUseError);
      expect((refused as PrefixInUseError).workers).toEqual([tasks.transport.options.workerId]);
      expect((refused as Error).message).toContain('nothing was deleted');
      await expect(deleteRedisTaskPrefix({ connection: redisUrl(), prefix: tasks.prefix })).rejects.toBeInstanceOf(
        PrefixInUseError,
      );
      // The live worker goes on writing (counters, its processing hash): what was there is still there.
      const after = new Set(await keysUnder(redis, tasks.prefix));
      expect(before.filter((key) => !key.includes(':processing:') && !after.has(key))).toEqual([]);
      expect(await redis.zcard(`${tasks.prefix}:{mail.send}:g:audit:delayed`)).toBe(1);

      await tasks.app.close();
      const left = (await keysUnder(redis, tasks.prefix)).filter(
        (key) => key === `${tasks.prefix}:queues` || key.startsWith(`${tasks.prefix}:{`),
      );
      const result = await deleteRedisTaskPrefix({ connection: redisUrl(), prefix: tasks.prefix });
      expect(result.prefix).toBe(tasks.prefix);
      expect(result.deleted).toBe(left.length);
      expect((await keysUnder(redis, tasks.prefix)).sort()).toEqual(
        neighbours.filter((key) => key.includes(':eu:')).sort(),
      );
      for (const key of neighbours) expect(await redis.get(key)).toBe('keep');
    } finally {
      await tasks.close();
      await redis.del(...neighbours);
      await redis.quit();
    }
  });

  it('names a bad prefix instead of deleting by a pattern it did not mean', async () => {
    await expect(deleteRedisTaskPrefix({ connection: redisUrl(), prefix: 'a b' })).rejects.toThrow(
      /option "prefix" must not contain braces, spaces/,
    );
    await expect(deleteRedisTaskPrefix({ connection: redisUrl(), prefix: '' })).rejects.toBeInstanceOf(
      InvalidOptionError,
    );
  });
});
