import { afterAll, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { EventPattern, Payload } from '@nestjs/microservices';
import { firstValueFrom } from 'rxjs';
import { versionAtLeast } from '../../lib/core/redis/guardrails.js';
import { RedisTaskClient, RedisTaskTransport, UnsafeRedisError } from '../../lib/index.js';
import { startRedisServer, type RedisServer } from '../../scripts/redis-server.mjs';
import { startWorker } from '../support/nest.js';
import { testPrefix, waitFor } from '../support/redis.js';

const handled: number[] = [];

@Controller()
class Handlers {
  @EventPattern<string>('guarded')
  guarded(@Payload() payload: { n: number }): void {
    handled.push(payload.n);
  }
}

let evicting: RedisServer | undefined;

async function evictingRedis(): Promise<RedisServer> {
  evicting ??= await startRedisServer(['--maxmemory-policy', 'allkeys-lru']);
  return evicting;
}

afterAll(async () => {
  await evicting?.stop();
});

describe('start-up guardrails', () => {
  it('refuses to start a worker on a Redis that may evict keys when evictionPolicy is "refuse", naming the setting', async () => {
    const server = await evictingRedis();
    const start = startWorker(testPrefix('evict'), [Handlers], { connection: server.url, evictionPolicy: 'refuse' });
    await expect(start).rejects.toBeInstanceOf(UnsafeRedisError);
    await expect(
      startWorker(testPrefix('evict'), [Handlers], { connection: server.url, evictionPolicy: 'refuse' }),
    ).rejects.toThrow(/maxmemory-policy is "allkeys-lru".*set maxmemory-policy noeviction/);
  });

  it('refuses a client the same way, leaving no connection open', async () => {
    const server = await evictingRedis();
    const client = new RedisTaskClient({
      connection: server.url,
      prefix: testPrefix('evict'),
      evictionPolicy: 'refuse',
    });
    await expect(client.connect()).rejects.toMatchObject({ code: 'UNSAFE_EVICTION_POLICY' });
    await expect(firstValueFrom(client.emit('guarded', { n: 1 }))).rejects.toMatchObject({
      code: 'UNSAFE_EVICTION_POLICY',
    });
    await client.close();
  });

  it('only warns by default: worker and client run on an evicting Redis', async () => {
    const server = await evictingRedis();
    const prefix = testPrefix('evict-warn');
    const worker = await startWorker(prefix, [Handlers], { connection: server.url });
    const client = new RedisTaskClient({ connection: server.url, prefix });
    try {
      await firstValueFrom(client.emit('guarded', { n: 7 }));
      await waitFor(() => handled.includes(7), 'the task to run');
    } finally {
      await client.close();
      await worker.app.close();
    }
  });

  it('compares Redis versions against the 6.2 minimum', () => {
    expect(versionAtLeast('6.0.16', '6.2.0')).toBe(false);
    expect(versionAtLeast('5.0.14', '6.2.0')).toBe(false);
    expect(versionAtLeast('6.2.0', '6.2.0')).toBe(true);
    expect(versionAtLeast('7.0.15', '6.2.0')).toBe(true);
    expect(versionAtLeast('10.0.0', '6.2.0')).toBe(true);
  });

  it('refuses an unknown evictionPolicy value, naming the option', () => {
    expect(() => new RedisTaskTransport({ evictionPolicy: 'maybe' as never })).toThrow(
      /option "evictionPolicy" must be "warn", "refuse" or "off"/,
    );
    expect(() => new RedisTaskClient({ evictionPolicy: 1 as never })).toThrow(/option "evictionPolicy"/);
  });
});
