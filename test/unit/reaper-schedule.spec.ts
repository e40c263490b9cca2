import { afterEach, beforeEach, describe, expect, it, jest } from '@jest/globals';
import type { SweepResult } from '../../lib/core/reaper/reaper.js';
import { ReaperSchedule, type Sweeper } from '../../lib/core/reaper/schedule.js';

/** A sweeper that records what the schedule asked for and answers with the next due time it is given. */
class RecordingSweeper implements Sweeper {
  readonly calls: string[] = [];
  clockOffsetMs = 0;
  nextDueAt: number | undefined;

  sweep(queues?: readonly string[]): Promise<SweepResult> {
    this.calls.push(`sweep ${queues?.join(',') ?? '*'}`);
    return Promise.resolve(this.result());
  }

  sweepInTurn(intervalMs: number): Promise<SweepResult | undefined> {
    this.calls.push(`turn ${intervalMs}`);
    return Promise.resolve(this.result());
  }

  promote(queues: readonly string[]): Promise<SweepResult> {
    this.calls.push(`promote ${queues.join(',')}`);
    return Promise.resolve(this.result());
  }

  private result(): SweepResult {
    const nextDueAt = this.nextDueAt;
    this.nextDueAt = undefined;
    return { recovered: 0, promoted: 0, deadLettered: 0, workersRemoved: 0, nextDueAt };
  }
}

/** Lets the schedule's promise chain run (no timer involved). */
async function settle(): Promise<void> {
  for (let i = 0; i < 10; i++) await Promise.resolve();
}

describe('ReaperSchedule', () => {
  beforeEach(() => {
    jest.useFakeTimers({ now: 1_000_000 });
  });

  afterEach(() => {
    jest.useRealTimers();
  });

  it('sweeps its own queues at start, then takes its turn in the deployment every interval', async () => {
    const sweeper = new RecordingSweeper();
    const schedule = new ReaperSchedule(sweeper, 5_000, () => ['a', 'b']);
    schedule.start();
    await settle();
    expect(sweeper.calls).toEqual(['sweep a,b']);
    await jest.advanceTimersByTimeAsync(5_000);
    await jest.advanceTimersByTimeAsync(5_000);
    expect(sweeper.calls).toEqual(['sweep a,b', 'turn 5000', 'turn 5000']);
    await schedule.stop();
    await jest.advanceTimersByTimeAsync(20_000);
    expect(sweeper.calls).toHaveLength(3);
  });

  it('with the interval off, only promotes its own queues (a RedisTaskReaper elsewhere sweeps)', async () => {
    const sweeper = new RecordingSweeper();
    const schedule = new ReaperSchedule(sweeper, false, () => ['a']);
    schedule.start();
    await settle();
    await jest.advanceTimersByTimeAsync(60_000);
    expect(sweeper.calls).toEqual(['promote a']);
    await schedule.stop();
  });

  it('promotes at the earliest due time it learns, on the Redis clock, not at the next interval', async () => {
    const sweeper = new RecordingSweeper();
    sweeper.clockOffsetMs = 300; // Redis is 300 ms ahead of this process
    const schedule = new ReaperSchedule(sweeper, 60_000, () => ['a']);
    sweeper.nextDueAt = Date.now() + 300 + 2_000; // due in 2 s, Redis time
    schedule.start();
    await settle();
    schedule.wakeAt(Date.now() + 300 + 5_000); // later than the known one: ignored
    await jest.advanceTimersByTimeAsync(1_999);
    expect(sweeper.calls).toEqual(['sweep a']);
    await jest.advanceTimersByTimeAsync(1);
    expect(sweeper.calls).toEqual(['sweep a', 'promote a']);
    await schedule.stop();
  });

  it('runs one pass at a time and logs a failed one without stopping', async () => {
    const errors: string[] = [];
    const sweeper = new RecordingSweeper();
    let fail = true;
    const failing: Sweeper = {
      clockOffsetMs: 0,
      sweep: (queues) => (fail ? ((fail = false), Promise.reject(new Error('redis down'))) : sweeper.sweep(queues)),
      sweepInTurn: (intervalMs) => sweeper.sweepInTurn(intervalMs),
      promote: (queues) => sweeper.promote(queues),
    };
    const schedule = new ReaperSchedule(failing, 1_000, () => ['a'], {
      log: () => undefined,
      warn: () => undefined,
      error: (m: string) => errors.push(m),
    });
    schedule.start();
    await settle();
    expect(errors).toEqual(['reaper sweep failed: redis down']);
    await jest.advanceTimersByTimeAsync(1_000);
    expect(sweeper.calls).toEqual(['turn 1000']);
    await schedule.stop();
  });
});
