import { describe, expect, it } from '@jest/globals';
import { LeaseLostError } from '../../../lib/core/model/errors.js';
import type { HeartbeatCalls, IdleLease } from '../../../lib/core/redis/gateway.js';
import { QueueKeys } from '../../../lib/core/redis/keys.js';
import type { TaskRedis } from '../../../lib/core/redis/scripts.js';
import { Lease } from '../../../lib/core/worker/lease.js';
import { RunningTasks } from '../../../lib/core/worker/running.js';
import { CapturingLogger, keys, workerOptions } from './fakes.js';

/** The lease alone: what each heartbeat reports, acted on. The gateway answers as the test says; no Redis. */
class HeartbeatGateway implements HeartbeatCalls {
  readonly beats: { running: readonly string[]; leaseMs: number | IdleLease; queue?: string }[] = [];
  lost: string[] = [];
  /** Whether beats record their shard's pattern (the tests of several shards). */
  named = false;

  heartbeat(
    keys: QueueKeys,
    _workerId: string,
    leaseMs: number | IdleLease,
    running: readonly string[] = [],
  ): Promise<{ now: number; lost: string[]; orphaned: string[] }> {
    this.beats.push({ running: [...running], leaseMs, ...(this.named ? { queue: keys.queue } : {}) });
    return Promise.resolve({
      now: Date.now(),
      lost: this.lost.filter((token) => running.includes(token)),
      orphaned: [],
    });
  }
}

async function until(what: string, check: () => boolean): Promise<void> {
  const deadline = Date.now() + 2_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

describe('Lease: the heartbeat and what it reconciles', () => {
  it('renews the lease for leaseMs plus one beat, reporting running and unacknowledged tokens as held', async () => {
    const gateway = new HeartbeatGateway();
    const running = new RunningTasks();
    const run = running.begin(keys, 'tok-running');
    const options = workerOptions({ heartbeatIntervalMs: 10, leaseMs: 100 });
    const lease = new Lease(
      {} as TaskRedis,
      gateway,
      running,
      () => ['tok-acked'],
      options,
      new CapturingLogger(),
      () => undefined,
    );
    await lease.take(keys);
    lease.start(() => [keys]);
    await until('a beat', () => gateway.beats.length >= 2);
    await lease.stop();
    // take(): registers with the idle lease (the held one should a task be there already), reconciles nothing.
    expect(gateway.beats[0]).toEqual({ running: [], leaseMs: { idle: 410, held: 110 } });
    expect(gateway.beats[1]).toEqual({ running: ['tok-running', 'tok-acked'], leaseMs: 110 });
    expect(run.abort.signal.aborted).toBe(false);
  });

  it('tells a run whose token Redis lost that its lease is gone (LeaseLostError on its signal), once', async () => {
    const gateway = new HeartbeatGateway();
    gateway.lost = ['tok-lost'];
    const running = new RunningTasks();
    const lost = running.begin(keys, 'tok-lost');
    const kept = running.begin(keys, 'tok-kept');
    const logger = new CapturingLogger();
    const lease = new Lease(
      {} as TaskRedis,
      gateway,
      running,
      () => [],
      workerOptions({ heartbeatIntervalMs: 10 }),
      logger,
      () => undefined,
    );
    lease.start(() => [keys]);
    await until('three beats', () => gateway.beats.length >= 3);
    await lease.stop();
    expect(lost.leaseLost).toBe(true);
    expect(lost.abort.signal.reason).toBeInstanceOf(LeaseLostError);
    expect(kept.abort.signal.aborted).toBe(false);
    expect(logger.lines.filter((line) => line.includes('lost the lease'))).toHaveLength(1);
  });

  it('renews a shard where nothing is at stake with the idle lease, when due; after a claim there, with the held lease', async () => {
    const gateway = new HeartbeatGateway();
    gateway.named = true;
    const running = new RunningTasks();
    // Beats every 10 ms; an idle lease of 4 * 100 + 10 ms is renewed two beats before its end, less up to a quarter.
    const options = workerOptions({ heartbeatIntervalMs: 10, leaseMs: 100 });
    const first = keys;
    const idle = new QueueKeys('unit', 'mail.idle');
    const lease = new Lease(
      {} as TaskRedis,
      gateway,
      running,
      () => [],
      options,
      new CapturingLogger(),
      () => undefined,
    );
    await lease.take(first);
    await lease.take(idle);
    gateway.beats.length = 0;
    const idleAt: number[] = [];
    const heartbeat = gateway.heartbeat.bind(gateway);
    gateway.heartbeat = (shard, workerId, leaseMs, running) => {
      if (shard.queue === 'mail.idle') idleAt.push(Date.now());
      return heartbeat(shard, workerId, leaseMs, running);
    };
    lease.start(() => [first, idle]);
    // The first renewal comes anywhere in the period (spread at random); the next one a period later: two beats
    // before the idle lease would end (390 ms after the last), less up to an eighth of that.
    await until('the idle shard renewed twice', () => idleAt.length >= 2);
    const between = idleAt[1] - idleAt[0];
    const idleBeats = gateway.beats.filter((beat) => beat.queue === 'mail.idle');
    expect(idleBeats.map((beat) => beat.leaseMs)).toEqual([
      { idle: 410, held: 110 },
      { idle: 410, held: 110 },
    ]);
    expect(between).toBeGreaterThanOrEqual(330);
    // The first shard (the pulse) beat every interval meanwhile.
    expect(gateway.beats.filter((beat) => beat.queue === 'mail.send').length).toBeGreaterThan(20);
    // A claim took tasks there (and they are done by the next beat): that beat renews it with the held lease.
    const before = gateway.beats.length;
    lease.claimed(idle);
    await until('a beat after the claim', () => gateway.beats.slice(before).some((beat) => beat.queue === 'mail.idle'));
    await lease.stop();
    expect(gateway.beats.slice(before).find((beat) => beat.queue === 'mail.idle')?.leaseMs).toBe(110);
  });
});
