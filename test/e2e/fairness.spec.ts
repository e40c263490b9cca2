import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { Ctx, EventPattern, Payload } from '@nestjs/microservices';
import { PrefixKeys, RedisTaskContext, RedisTaskRecordBuilder } from '../../lib/index.js';
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
  afterEach(() => {
    release?.();
    timeline.length = 0;
  });

  it("starts another pattern's task within one slow task's run while a flood holds every slot (default settings)", async () => {
    prefix = testPrefix('fair-patterns');
    const { client, module } = await startProducer(prefix);
    started.push(module);
    openGate();
    const worker = await startWorker(prefix, [Mixed], { concurrency: 4 });
    started.push(worker.app);
    await client.emitBatch(
      'media.encode',
      Array.from({ length: 40 }, (_, n) => ({ n })),
    );
    await waitFor(() => timeline.filter((item) => item.event === 'start').length === 4, 'every slot held by the flood');
    await client.emitBatch('avatar.resize', [{ n: 0 }]);
    // Each round lets the 4 running slow tasks end (one task's run); the avatar must start within the first.
    let rounds = 0;
    while (!timeline.some((item) => item.pattern === 'avatar.resize') && rounds < 10) {
      const ended = timeline.filter((item) => item.event === 'end').length;
      openGate();
      rounds++;
      await waitFor(
        () => timeline.filter((item) => item.event === 'end').length >= ended + 4,
        `round ${rounds}: the running slow tasks to end`,
      );
      await waitFor(
        () =>
          timeline.some((item) => item.pattern === 'avatar.resize') ||
          timeline.filter((item) => item.event === 'start' && item.pattern === 'media.encode').length >=
            4 * (rounds + 1),
        `round ${rounds}: the freed slots filled`,
      );
    }
    expect(rounds).toBe(1);
    const avatarAt = timeline.findIndex((item) => item.pattern === 'avatar.resize');
    const encodesStartedFirst = timeline.slice(0, avatarAt).filter((item) => item.event === 'start').length;
    // The 4 that held the slots when it was emitted, and at most the 3 others freed in the same round.
    expect(encodesStartedFirst).toBeLessThanOrEqual(7);
    openGate();
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
