import { describe, expect, it } from '@jest/globals';
import { QueueKeys } from '../../../lib/core/redis/keys.js';
import { claimed, envelope, FakeGateway, keys, parts } from './fakes.js';

/** The completer alone: which successes ride on a claim call, which go in this turn's ackTasks call. */
describe('Completer: the one place a success is completed', () => {
  it("rides a plain success on its shard's claim loop (told of each), and answers its caller from the call's reply", () => {
    const { completer } = parts();
    const gateway = new FakeGateway();
    const told: string[] = [];
    completer.shard(keys).ridden(() => told.push('queued'));
    const heard: boolean[] = [];
    const [held, lost] = [claimed(gateway), claimed(gateway)];
    expect(completer.ride(held, envelope(), (ok) => heard.push(ok))).toBe(true);
    expect(completer.ride(lost, envelope(), (ok) => heard.push(ok))).toBe(true);
    expect(told).toEqual(['queued', 'queued']);
    // The lease counts them as running until the call answered.
    expect(completer.unacknowledged(keys)).toEqual([held.token, lost.token]);
    const taken = completer.shard(keys).take();
    expect(completer.unacknowledged(keys)).toEqual([held.token, lost.token]);
    completer.shard(keys).answered(taken, [lost.token]);
    expect(heard).toEqual([true, false]);
    expect(completer.unacknowledged(keys)).toEqual([]);
  });

  it("rides a tracked success with its id, and with its index's keep when its claim recorded it running", () => {
    const { completer } = parts();
    const gateway = new FakeGateway();
    completer.shard(keys).ridden(() => undefined);
    const tracked = envelope({ track: 1 });
    const plain = claimed(gateway, tracked);
    const recorded = Object.assign(claimed(gateway, tracked), { keepOfIndex: '60000' });
    completer.ride(plain, tracked, () => undefined);
    completer.ride(recorded, tracked, () => undefined);
    expect(
      completer
        .shard(keys)
        .take()
        .map(([token, , sent]) => [token, sent]),
    ).toEqual([
      [plain.token, tracked.id],
      [recorded.token, `${tracked.id}\t60000`],
    ]);
  });

  it('puts back what a failed claim call carried, for the next call: nothing lost, only later', () => {
    const { completer } = parts();
    const gateway = new FakeGateway();
    completer.shard(keys).ridden(() => undefined);
    const task = claimed(gateway);
    completer.ride(task, envelope(), () => undefined);
    const taken = completer.shard(keys).take();
    completer.shard(keys).failed(taken);
    expect(completer.unacknowledged(keys)).toEqual([task.token]);
    expect(
      completer
        .shard(keys)
        .take()
        .map(([token]) => token),
    ).toEqual([task.token]);
  });

  it('does not ride a send() task, a task with a deduplication key, a shard with no claim loop, or anything after release', () => {
    const { completer } = parts();
    const gateway = new FakeGateway();
    completer.shard(keys).ridden(() => undefined);
    const answer = () => undefined;
    expect(completer.ride(claimed(gateway), envelope({ replyTo: 'unit:replies:1' }), answer)).toBe(false);
    expect(completer.ride(claimed(gateway), envelope({ dedupKey: 'k' }), answer)).toBe(false);
    const other = new QueueKeys('unit', 'other.pattern');
    expect(completer.ride(Object.assign(claimed(gateway), { keys: other }), envelope(), answer)).toBe(false);
    completer.release();
    expect(completer.released).toBe(true);
    expect(completer.ride(claimed(gateway), envelope(), answer)).toBe(false);
  });

  it("acknowledges the others in this turn's ackTasks call: token, id, deduplication key, reply channel and message, result TTL", async () => {
    const { completer, batch } = parts();
    const gateway = new FakeGateway();
    const task = claimed(gateway);
    batch.answers = [false];
    await expect(
      completer.acknowledge(
        task,
        envelope({ id: 'q-1', replyTo: 'unit:replies:1', dedupKey: 'k' }),
        '{"id":"q-1","response":1}',
      ),
    ).resolves.toBe(false);
    await expect(completer.acknowledge(task, envelope({ id: 'q-2' }))).resolves.toBe(true);
    expect(batch.acks).toEqual([
      {
        token: task.token,
        taskId: 'q-1',
        deduplicationKey: 'k',
        reply: { channel: 'unit:replies:1', message: '{"id":"q-1","response":1}' },
        resultTtlMs: 60_000,
      },
      { token: task.token, taskId: 'q-2', deduplicationKey: undefined, reply: undefined, resultTtlMs: 60_000 },
    ]);
  });
});
