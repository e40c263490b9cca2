import { describe, expect, it } from '@jest/globals';
import { QueueKeys } from '../../lib/core/redis/keys.js';
import type { AckItem } from '../../lib/core/model/prepared-task.js';
import { TurnBatch, type AckBatch } from '../../lib/core/worker/turn-batch.js';
import { ACK_CHUNK, ClaimAcks, nextTokenPrefix } from '../../lib/core/worker/claim-acks.js';

/** The gateway's acknowledge, answered by the test: each call recorded with its acknowledgements. */
class AnsweringGateway {
  readonly calls: {
    queue: string;
    workerId: string;
    acks: readonly AckItem[];
    answer: (held: boolean[]) => void;
    fail: (error: Error) => void;
  }[] = [];

  acknowledge(keys: QueueKeys, workerId: string, acks: readonly AckItem[]): Promise<boolean[]> {
    return new Promise((answer, fail) => this.calls.push({ queue: keys.queue, workerId, acks, answer, fail }));
  }
}

/** A batch whose calls go to the test's gateway. */
const batchOver = (gateway: AnsweringGateway): AckBatch =>
  new TurnBatch((keys, workerId, acks) => gateway.acknowledge(keys, workerId, acks));

/** The end of the current event-loop turn (the batch is sent on process.nextTick). */
const afterTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

const fields = (token: string): AckItem => ({ token, taskId: `id-${token}`, resultTtlMs: 5_000 });

describe('TurnBatch: acknowledgements of one turn share one call per worker and shard', () => {
  it('sends one call per processing hash after the turn, and answers each caller with its own result', async () => {
    const gateway = new AnsweringGateway();
    const batch = batchOver(gateway);
    const shardA = new QueueKeys('t', 'a');
    const shardB = new QueueKeys('t', 'b');
    const answers = [
      batch.add(shardA, 'w1', fields('1')),
      batch.add(shardA, 'w1', fields('2')),
      batch.add(shardB, 'w1', fields('3')),
      batch.add(shardA, 'w2', fields('4')),
    ];
    expect(gateway.calls).toHaveLength(0); // nothing sent before the turn ends
    await afterTurn();
    expect(gateway.calls.map(({ queue, workerId, acks }) => [queue, workerId, acks.map((ack) => ack.token)])).toEqual([
      ['a', 'w1', ['1', '2']],
      ['b', 'w1', ['3']],
      ['a', 'w2', ['4']],
    ]);
    gateway.calls[0].answer([true, false]);
    gateway.calls[1].answer([true]);
    gateway.calls[2].fail(new Error('connection lost'));
    await expect(answers[0]).resolves.toBe(true);
    await expect(answers[1]).resolves.toBe(false);
    await expect(answers[2]).resolves.toBe(true);
    await expect(answers[3]).rejects.toThrow('connection lost');
  });

  it('starts a new batch in the next turn', async () => {
    const gateway = new AnsweringGateway();
    const batch = batchOver(gateway);
    const keys = new QueueKeys('t', 'a');
    void batch.add(keys, 'w1', fields('1'));
    await afterTurn();
    void batch.add(keys, 'w1', fields('2'));
    await afterTurn();
    expect(gateway.calls).toHaveLength(2);
  });
});

describe('ClaimAcks: acknowledgements riding on the claim call', () => {
  it('takes at most one chunk, keeps taken tokens as unacknowledged until answered, and tells lost ones', () => {
    const acks = new ClaimAcks();
    const heard = new Map<string, boolean>();
    for (let i = 0; i < ACK_CHUNK + 2; i++) acks.add(`t${i}`, (held) => heard.set(`t${i}`, held));
    const taken = acks.take();
    expect(taken).toHaveLength(ACK_CHUNK);
    expect(acks.size).toBe(2);
    expect(acks.unacknowledged).toHaveLength(ACK_CHUNK + 2);
    acks.answered(taken, ['t1']);
    expect(heard.get('t0')).toBe(true);
    expect(heard.get('t1')).toBe(false);
    expect(acks.unacknowledged.sort()).toEqual([`t${ACK_CHUNK}`, `t${ACK_CHUNK + 1}`]);
  });

  it('puts a failed call back, so nothing is lost, only sent later', () => {
    const acks = new ClaimAcks();
    acks.add('t1', () => undefined);
    const taken = acks.take();
    expect(acks.size).toBe(0);
    acks.failed(taken);
    expect(acks.size).toBe(1);
    expect(acks.unacknowledged).toEqual(['t1']);
  });

  it('gives every claim call a token prefix no other call gets, sorting in call order', () => {
    const prefixes = Array.from({ length: 50 }, () => nextTokenPrefix());
    expect(new Set(prefixes).size).toBe(50);
    expect([...prefixes].sort()).toEqual(prefixes);
  });
});
