import { describe, expect, it } from '@jest/globals';
import { LeaseLostError } from '../../../lib/core/model/errors.js';
import type { HeartbeatCalls } from '../../../lib/core/redis/gateway.js';
import type { TaskRedis } from '../../../lib/core/redis/scripts.js';
import { Lease } from '../../../lib/core/worker/lease.js';
import { RunningTasks } from '../../../lib/core/worker/running.js';
import { CapturingLogger, keys, workerOptions } from './fakes.js';

/** The lease alone: what each heartbeat reports, acted on. The gateway answers as the test says; no Redis. */
class HeartbeatGateway implements HeartbeatCalls {
  readonly beats: { running: readonly string[]; leaseMs: number }[] = [];
  lost: string[] = [];

  heartbeat(
    _keys: unknown,
    _workerId: string,
    leaseMs: number,
    running: readonly string[] = [],
  ): Promise<{ now: number; lost: string[]; orphaned: string[] }> {
    this.beats.push({ running: [...running], leaseMs });
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
    expect(gateway.beats[0]).toEqual({ running: [], leaseMs: 110 }); // take(): renews, reconciles nothing
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
});
