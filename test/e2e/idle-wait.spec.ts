import { afterAll, describe, expect, it } from '@jest/globals';
import { Redis } from 'ioredis';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { gatewayOf } from '../../lib/core/redis/gateway.js';
import { defineScripts } from '../../lib/core/redis/scripts.js';
import { BlockingSlot, IdleWait } from '../../lib/core/worker/idle-wait.js';
import { WakeSignals } from '../../lib/core/worker/wake-signals.js';
import { deleteKeys, openRedis, redisUrl, testPrefix } from '../support/redis.js';

/**
 * A process whose one claim loop waits on its bell subscribes to no wake channel (runtime.ts); if a stray
 * write broke its bell, its loop waits for messages instead, so it subscribes then, and claims once.
 */
const redis = openRedis();
/** The loop's backstop: a wait with no message claims after 0.8 to 1 times this. */
const BACKSTOP_MS = 300;

afterAll(async () => {
  await redis.quit();
});

describe('a lone loop whose bell holds another type (real Redis)', () => {
  it('subscribes to its wake channel at its first wait for messages, then claims once; a refused subscription is asked again at the next wait', async () => {
    const prefix = testPrefix('broken-bell');
    const keys = new PrefixKeys(prefix).queue('bell.broken');
    const blocking = new Redis(redisUrl());
    const signals = new WakeSignals();
    const subscribed: string[] = [];
    let refuse = true;
    signals.leaveUnheard([keys.wakeChannel], async (channel) => {
      if (refuse) throw new Error('the subscriber is down');
      subscribed.push(channel);
    });
    const waker = signals.waker(keys.wakeChannel);
    let woken = 0;
    const wake = waker.wake.bind(waker);
    waker.wake = () => {
      woken++;
      wake();
    };
    const idle = new IdleWait(
      waker,
      gatewayOf(defineScripts(redis)),
      keys,
      BACKSTOP_MS,
      new BlockingSlot(defineScripts(blocking), true),
    );
    const signal = new AbortController().signal;
    const request = { workerId: 'w1', wanted: 1, clientConcurrency: 0, tokenPrefix: 'p.', leaseMs: 30_000, acks: [] };
    try {
      await redis.set(keys.bell, 'stray');
      // The first wait holds the bell: its BLPOP is refused at once (WRONGTYPE), so the loop needs its messages.
      const first = await idle.wait(request, signal);
      expect(String((first?.error as Error | undefined)?.message)).toMatch(/^WRONGTYPE/);
      expect(subscribed).toEqual([]);
      // The next wait is for its message: it asks for the channel; refused (the subscriber is down), it claims at its backstop.
      const second = await idle.wait(request, signal);
      expect(second?.claim?.status).toBe('fulfilled');
      expect(subscribed).toEqual([]);
      expect(woken).toBe(0);
      // Asked again at the next wait: subscribed, and woken once for what it may have missed (it claims at once).
      refuse = false;
      const third = await idle.wait(request, signal);
      expect(third?.claim?.status).toBe('fulfilled');
      expect(subscribed).toEqual([keys.wakeChannel]);
      expect(woken).toBe(1);
      // Subscribed once: a later wait asks nothing more.
      waker.listen();
      await new Promise((resolve) => setImmediate(resolve));
      expect(subscribed).toEqual([keys.wakeChannel]);
    } finally {
      blocking.disconnect();
      await deleteKeys(redis, prefix);
    }
  });
});
