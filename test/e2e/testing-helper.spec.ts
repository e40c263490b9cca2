import { describe, expect, it } from '@jest/globals';
import { Controller, Injectable } from '@nestjs/common';
import { EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { firstValueFrom } from 'rxjs';
import { createRedisTaskTestingApp } from '../../lib/testing.js';
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
    const tasks = await createRedisTaskTestingApp({ connection: redisUrl(), controllers: [MailController], providers: [Mailer] });
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
      configure: (builder) => builder.overrideProvider(Mailer).useValue({ sent: [], send: () => new Promise(() => undefined) }),
      transport: { shutdownTimeoutMs: 0 },
    });
    try {
      await firstValueFrom(tasks.client.emit('mail.send', { to: 'stuck@example.com' }));
      await expect(tasks.drain('mail.send', 300)).rejects.toThrow(/did not drain within 300 ms \(mail\.send: 0 pending, 1 in flight, 0 delayed\)/);
    } finally {
      await tasks.close();
    }
  });
});
