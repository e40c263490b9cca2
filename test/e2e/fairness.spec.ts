import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { Ctx, EventPattern, Payload } from '@nestjs/microservices';
import { RedisTaskContext, RedisTaskRecordBuilder } from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { startProducer, startWorker } from '../support/nest.js';
import { deleteKeys, openRedis, testPrefix, waitFor } from '../support/redis.js';

const redis = openRedis();
const started: { close(): Promise<unknown> }[] = [];
let prefix = '';
const starts: { clientId: string; n: number }[] = [];

@Controller()
class Tenants {
  @EventPattern<string>('tenant.job')
  async job(@Payload() payload: { n: number }, @Ctx() ctx: RedisTaskContext): Promise<void> {
    starts.push({ clientId: ctx.getClientId(), n: payload.n });
    await new Promise((resolve) => setImmediate(resolve));
  }
}

afterEach(async () => {
  await Promise.all(started.splice(0).map((app) => app.close()));
  await deleteKeys(redis, prefix);
  starts.length = 0;
});

describe('fairness across clients', () => {
  it("runs a second client's task before the flooding client's next 10, with 5,000 of the first pending", async () => {
    prefix = testPrefix('fair');
    const { client, module } = await startProducer(prefix, { clientId: 'flood' });
    started.push(module);
    await client.emitBatch(
      'tenant.job',
      Array.from({ length: 5_000 }, (_, n) => ({ n })),
    );
    const pending = new PrefixKeys(prefix).queue('tenant.job').pending('flood');
    expect(await redis.llen(pending)).toBe(5_000);

    const worker = await startWorker(prefix, [Tenants], { concurrency: 4, prefetch: 4 });
    started.push(worker.app);
    await waitFor(() => starts.length >= 200, 'the flood to be under way');
    const floodStartsBefore = starts.length;
    await client.emitBatch('tenant.job', [new RedisTaskRecordBuilder({ n: -1 }).setClientId('quiet').build()]);

    await waitFor(() => starts.some((start) => start.clientId === 'quiet'), "the quiet client's task to start");
    const quietIndex = starts.findIndex((start) => start.clientId === 'quiet');
    const floodTasksInBetween = quietIndex - floodStartsBefore;
    expect(floodTasksInBetween).toBeLessThan(10);
    expect(await redis.llen(pending)).toBeGreaterThan(3_000); // the flood was still deep when "quiet" ran
  });
});

/** Starts and ends of the handlers of two patterns sharing one worker, in the order they happened. */
const timeline: { event: 'start' | 'end'; pattern: string; n: number }[] = [];
let release: (() => void) | undefined;
let hold: Promise<void> = Promise.resolve();

/** Slow tasks held one by one (EncodeOnly, SlowAvatars): each waits for its own release, oldest first. */
const heldOneByOne: (() => void)[] = [];

/** Ends the oldest running slow task (one task's run, as the test counts time). */
function releaseOne(): void {
  heldOneByOne.shift()?.();
}

/** Lets every held slow task finish, and holds the next ones until `openGate()` is called again. */
function openGate(): void {
  release?.();
  hold = new Promise((resolve) => (release = resolve));
}

@Controller()
class Mixed {
  /** A slow pattern: each run ends once the test opens the gate (so "one task's run" is the test's to say). */
  @EventPattern<string>('media.encode')
  async encode(@Payload() payload: { n: number }): Promise<void> {
    timeline.push({ event: 'start', pattern: 'media.encode', n: payload.n });
    await hold;
    timeline.push({ event: 'end', pattern: 'media.encode', n: payload.n });
  }

  @EventPattern<string>('avatar.resize')
  resize(@Payload() payload: { n: number }): void {
    timeline.push({ event: 'start', pattern: 'avatar.resize', n: payload.n });
  }
}

@Controller()
class CappedByExtra {
  @EventPattern<string>('media.encode', { concurrency: 2 })
  async encode(@Payload() payload: { n: number }): Promise<void> {
    timeline.push({ event: 'start', pattern: 'media.encode', n: payload.n });
    await hold;
    timeline.push({ event: 'end', pattern: 'media.encode', n: payload.n });
  }
}

/** The handlers of `pattern` running now, read off the timeline. */
function running(pattern: string): number {
  return timeline
    .filter((item) => item.pattern === pattern)
    .reduce((n, item) => n + (item.event === 'start' ? 1 : -1), 0);
}

@Controller()
class EncodeOnly {
  @EventPattern<string>('media.encode')
  async encode(@Payload() payload: { n: number }): Promise<void> {
    timeline.push({ event: 'start', pattern: 'media.encode', n: payload.n });
    await new Promise<void>((resolve) => heldOneByOne.push(resolve));
    timeline.push({ event: 'end', pattern: 'media.encode', n: payload.n });
  }
}

@Controller()
class SlowAvatars {
  @EventPattern<string>('avatar.slow')
  async resize(@Payload() payload: { n: number }): Promise<void> {
    timeline.push({ event: 'start', pattern: 'avatar.slow', n: payload.n });
    await new Promise<void>((resolve) => heldOneByOne.push(resolve));
    timeline.push({ event: 'end', pattern: 'avatar.slow', n: payload.n });
  }
}

/** The most handlers of `pattern` that ran at once, read off the timeline. */
function mostAtOnce(pattern: string): number {
  let running = 0;
  let most = 0;
  for (const entry of timeline.filter((item) => item.pattern === pattern)) {
    running += entry.event === 'start' ? 1 : -1;
    most = Math.max(most, running);
  }
  return most;
}

describe('fairness across patterns of one worker', () => {
  afterEach(async () => {
    release?.();
    while (heldOneByOne.length > 0) releaseOne();
    // Closed before the timeline is cleared: a released handler ends a microtask later, and a worker left running
    // would add its ends (or new starts) to the next test's timeline.
    await Promise.all(started.splice(0).map((app) => app.close()));
    timeline.length = 0;
  });

  it("starts another pattern's task at once while a slow flood of one pattern keeps the worker busy (default settings)", async () => {
    prefix = testPrefix('fair-patterns');
    const { client, module } = await startProducer(prefix);
    started.push(module);
    openGate(); // no slow task ends until the test says so
    const worker = await startWorker(prefix, [Mixed], { concurrency: 4 });
    started.push(worker.app);
    await client.emitBatch(
      'media.encode',
      Array.from({ length: 40 }, (_, n) => ({ n })),
    );
    await waitFor(() => timeline.filter((item) => item.event === 'start').length >= 3, 'the flood to be under way');
    await client.emitBatch('avatar.resize', [{ n: 0 }]);
    // Not one slow task ended, and the avatar task ran: a slot was kept free for the idle pattern.
    await waitFor(() => timeline.some((item) => item.pattern === 'avatar.resize'), 'the avatar task to start');
    expect(timeline.filter((item) => item.event === 'end')).toEqual([]);
    expect(mostAtOnce('media.encode')).toBe(3);
    // Once more after it: the slot is kept again, and again taken at once.
    await client.emitBatch('avatar.resize', [{ n: 1 }]);
    await waitFor(
      () => timeline.filter((item) => item.pattern === 'avatar.resize').length === 2,
      'the second avatar task',
    );
    expect(timeline.filter((item) => item.event === 'end')).toEqual([]);
    // The flood itself runs on, three at a time, to its end.
    const ends = () => timeline.filter((item) => item.event === 'end').length;
    while (ends() < 40) {
      const ended = ends();
      // The gate opens once the next tasks wait on it: one that started after it opened would wait for the next.
      await waitFor(() => running('media.encode') === Math.min(3, 40 - ended), "the flood's next tasks to start");
      openGate();
      await waitFor(() => ends() > ended, 'the next slow tasks to end');
    }
    expect(mostAtOnce('media.encode')).toBe(3);
  });

  it('gives a pattern below its fair share the next freed slot: two busy patterns converge on equal shares', async () => {
    prefix = testPrefix('fair-shares');
    const { client, module } = await startProducer(prefix);
    started.push(module);
    // Each slow task ends when the test releases it, oldest first.
    const worker = await startWorker(prefix, [EncodeOnly, SlowAvatars], { concurrency: 4 });
    started.push(worker.app);
    await client.emitBatch(
      'media.encode',
      Array.from({ length: 20 }, (_, n) => ({ n })),
    );
    await waitFor(() => timeline.filter((item) => item.event === 'start').length >= 3, 'the flood to be under way');
    await client.emitBatch(
      'avatar.slow',
      Array.from({ length: 20 }, (_, n) => ({ n })),
    );
    // The free slot goes to the avatars at once; after that, each slot a slow encode frees goes to the avatars
    // until both patterns hold 2 (their fair share of 4).
    await waitFor(() => running('avatar.slow') === 1, 'the first slow avatar to start');
    releaseOne(); // an encode ends
    await waitFor(() => running('avatar.slow') === 2, 'the freed slot to go to the pattern below its share');
    expect(running('media.encode')).toBe(2);
    releaseOne(); // another encode ends: now both hold their share, and the freed slot goes back to the encodes
    await waitFor(
      () =>
        timeline.filter((item) => item.event === 'end').length === 2 &&
        running('media.encode') === 2 &&
        running('avatar.slow') === 2,
      'equal shares',
    );
    expect(running('media.encode') + running('avatar.slow')).toBe(4);
  });

  it('holds a pattern to patternConcurrency (transport option) and to its handler extra, leaving the rest of the slots to others', async () => {
    for (const [controller, options] of [
      [Mixed, { concurrency: 6, patternConcurrency: { 'media.encode': 2 } }],
      [CappedByExtra, { concurrency: 6 }],
    ] as const) {
      prefix = testPrefix('pattern-cap');
      timeline.length = 0;
      const { client, module } = await startProducer(prefix);
      openGate();
      const worker = await startWorker(prefix, [controller], options);
      await client.emitBatch(
        'media.encode',
        Array.from({ length: 6 }, (_, n) => ({ n })),
      );
      await waitFor(() => timeline.filter((item) => item.event === 'start').length >= 2, 'two encodes running');
      // Had the cap not held, the four free slots would take the rest of the encodes now.
      if (controller === Mixed) {
        await client.emitBatch('avatar.resize', [{ n: 1 }]);
        await waitFor(() => timeline.some((item) => item.pattern === 'avatar.resize'), 'the avatar to run meanwhile');
      }
      expect(mostAtOnce('media.encode')).toBe(2);
      while (timeline.filter((item) => item.event === 'end').length < 6) {
        const ended = timeline.filter((item) => item.event === 'end').length;
        openGate();
        await waitFor(() => timeline.filter((item) => item.event === 'end').length > ended, 'the next encodes to end');
      }
      expect(mostAtOnce('media.encode')).toBe(2);
      await worker.app.close();
      await module.close();
      await deleteKeys(redis, prefix);
    }
  });
});

afterAll(async () => {
  await redis.quit();
});
