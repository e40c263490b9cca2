import { afterAll, describe, expect, it } from '@jest/globals';
import { Redis } from 'ioredis';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { gatewayOf } from '../../lib/core/redis/gateway.js';
import { defineScripts } from '../../lib/core/redis/scripts.js';
import { BlockingSlot, IdleWait } from '../../lib/core/worker/idle-wait.js';
import { WakeSignals } from '../../lib/core/worker/wake-signals.js';
import { monitor, type MonitoredCommand } from '../support/monitor.js';
import { deleteKeys, openRedis, redisUrl, scriptNamesBySha, testPrefix, waitFor } from '../support/redis.js';

/**
 * An idle claim loop's wait (idle-wait.ts) on a real Redis: what it sends ahead of its blocking read, and a
 * lone loop whose bell a stray write broke (its process subscribes to no wake channel until then).
 */
const redis = openRedis();
/** The loop's backstop: a wait with no message claims after 0.8 to 1 times this. */
const BACKSTOP_MS = 300;

afterAll(async () => {
  await redis.quit();
});

describe('an idle wait (real Redis)', () => {
  it('sends the call it is given ahead of its blocking read, on the same connection and before it', async () => {
    const prefix = testPrefix('wait-first');
    const keys = new PrefixKeys(prefix).queue('wait.first');
    const blocking = new Redis(redisUrl());
    const idle = new IdleWait(
      new WakeSignals().waker(keys.wakeChannel),
      gatewayOf(defineScripts(redis)),
      keys,
      BACKSTOP_MS,
      new BlockingSlot(defineScripts(blocking), true),
    );
    const names = scriptNamesBySha();
    const seen: MonitoredCommand[] = [];
    const watching = await monitor(redisUrl(), (command) => seen.push(command));
    const request = { workerId: 'w1', wanted: 1, clientConcurrency: 0, tokenPrefix: 'p.', leaseMs: 30_000 };
    try {
      await blocking.ping(); // connected: its commands leave in one write
      let acknowledged: Promise<unknown> | undefined;
      const end = await idle.wait({ ...request, acks: [] }, new AbortController().signal, (gateway) => {
        acknowledged = gateway.claim(keys, { ...request, wanted: 0, acks: ['gone-token'] });
      });
      await acknowledged;
      expect(end?.claim?.status).toBe('fulfilled');
      const mine = await waitFor(() => {
        const found = seen.filter(
          ({ args }) =>
            (args[0].toLowerCase() === 'evalsha' && names.get(args[1]) === 'claimTasks' && args[3] === keys.base) ||
            (args[0].toLowerCase() === 'blpop' && args[1] === keys.bell),
        );
        return found.length === 3 ? found : undefined;
      }, 'the three commands');
      // The call given (it asks for nothing), the blocking read, the claim behind it: one connection, in this order.
      expect(mine.map(({ args }) => (args[0].toLowerCase() === 'blpop' ? 'blpop' : `claim ${args[4]}`))).toEqual([
        'claim 0',
        'blpop',
        'claim 1',
      ]);
      expect(new Set(mine.map(({ source }) => source)).size).toBe(1);
    } finally {
      watching.stop();
      blocking.disconnect();
      await deleteKeys(redis, prefix);
    }
  });
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
