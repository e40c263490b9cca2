import { describe, expect, it } from '@jest/globals';
import type { PreparedTask } from '../../../lib/core/model/prepared-task.js';
import {
  EnqueueCoalescer,
  ReplicationShortfall,
  TIMED_OUT,
  type CallSettings,
  type EnqueuePart,
} from '../../../lib/core/producer/enqueue-coalescer.js';
import type { EnqueueCall, Replicated, EnqueueCalls } from '../../../lib/core/redis/gateway.js';
import { QueueKeys } from '../../../lib/core/redis/keys.js';

/**
 * The enqueue coalescer alone, over a gateway the test answers: which parts go in which call, and how
 * each caller hears its own outcome. No Redis.
 */
class AnsweringGateway implements EnqueueCalls {
  readonly calls: {
    root: string;
    call: EnqueueCall;
    durable: boolean;
    answer: (results: (0 | string)[] | -1) => void;
    fail: (error: Error) => void;
  }[] = [];
  /** What a durable call answers, when the test says. */
  replicated?: Replicated;

  enqueue(keys: QueueKeys, call: EnqueueCall): Promise<(0 | string)[] | -1> {
    return new Promise((answer, fail) => this.calls.push({ root: keys.root, call, durable: false, answer, fail }));
  }

  enqueueReplicated(keys: QueueKeys, call: EnqueueCall): Promise<Replicated> {
    return new Promise((answer, fail) =>
      this.calls.push({
        root: keys.root,
        call,
        durable: true,
        answer: (results) => answer(this.replicated ?? { kind: 'replicated', results: results as (0 | string)[] }),
        fail,
      }),
    );
  }
}

const afterTurn = () => new Promise<void>((resolve) => setImmediate(resolve));
const settings: CallSettings = { chunkSize: 4, timeoutMs: 5_000 };
const shardA = new QueueKeys('unit', 'a');
const shardB = new QueueKeys('unit', 'b');

function task(id: string): PreparedTask {
  return {
    id,
    clientId: 'c',
    entry: `0|{"id":"${id}"}`,
    priority: 0,
    delayMs: 0,
    deduplicationTtlMs: 1_000,
    awaitsReply: false,
  };
}

/** A caller's part, recording what it heard. */
function part(keys: QueueKeys, ids: string[]): EnqueuePart & { heard: unknown[] } {
  const heard: unknown[] = [];
  const made: EnqueuePart & { heard: unknown[] } = {
    keys,
    tasks: ids.map(task),
    sent: false,
    settled: false,
    heard,
    answer(results, at) {
      heard.push(results.slice(at, at + ids.length));
    },
    fail(error) {
      heard.push(
        error === TIMED_OUT
          ? 'timed out'
          : error instanceof ReplicationShortfall
            ? `short: ${error.acknowledged}`
            : (error as Error).message,
      );
    },
  };
  return made;
}

const tasksOf = (call: EnqueueCall) => call.batches.map((batch) => batch.tasks.map((each) => each.id));

describe('EnqueueCoalescer: the parts of one turn, one call per shard and settings', () => {
  it('sends the parts of a turn as one call per shard, in call order, and answers each caller with its own results', async () => {
    const gateway = new AnsweringGateway();
    const coalescer = new EnqueueCoalescer(gateway);
    const parts = [part(shardA, ['1']), part(shardB, ['2']), part(shardA, ['3', '4'])];
    for (const each of parts) coalescer.add('s', settings, each);
    expect(gateway.calls).toHaveLength(0); // nothing before the turn ends
    await afterTurn();
    expect(gateway.calls.map(({ root, call }) => [root, tasksOf(call)])).toEqual([
      [shardA.root, [['1'], ['3', '4']]],
      [shardB.root, [['2']]],
    ]);
    expect(parts.every((each) => each.sent)).toBe(true);
    gateway.calls[0].answer([0, 'holder', 0]);
    gateway.calls[1].answer([0]);
    await afterTurn();
    expect(parts.map((each) => each.heard)).toEqual([[[0]], [[0]], [['holder', 0]]]);
  });

  it('chunks a turn by chunkSize without ever splitting a part, and keeps settings apart', async () => {
    const gateway = new AnsweringGateway();
    const coalescer = new EnqueueCoalescer(gateway);
    coalescer.add('s', settings, part(shardA, ['1', '2', '3']));
    coalescer.add('s', settings, part(shardA, ['4', '5'])); // would make 5 > 4: a call of its own
    coalescer.add('other', { chunkSize: 100, timeoutMs: 5_000 }, part(shardA, ['6']));
    await afterTurn();
    expect(gateway.calls.map(({ call }) => tasksOf(call))).toEqual([[['1', '2', '3']], [['4', '5']], [['6']]]);
  });

  it('fails every part of a call Redis refused, of a resend that found no record (-1), and of a short WAIT', async () => {
    const gateway = new AnsweringGateway();
    const coalescer = new EnqueueCoalescer(gateway);
    const refused = [part(shardA, ['1']), part(shardA, ['2'])];
    for (const each of refused) coalescer.add('s', settings, each);
    const unanswered = part(shardB, ['3']);
    coalescer.add('s', settings, unanswered);
    const durable = part(shardA, ['4']);
    coalescer.add('durable', { chunkSize: 4, timeoutMs: 5_000, durability: { replicas: 1, timeoutMs: 100 } }, durable);
    await afterTurn();
    gateway.calls[0].fail(new Error('OOM command not allowed'));
    gateway.calls[1].answer(-1);
    gateway.replicated = { kind: 'short', results: [0], acknowledged: 0 };
    gateway.calls[2].answer([0]);
    await afterTurn();
    expect(refused.map((each) => each.heard)).toEqual([['OOM command not allowed'], ['OOM command not allowed']]);
    expect(unanswered.heard).toEqual([expect.stringContaining('found no record of an earlier send; it wrote nothing')]);
    expect(durable.heard).toEqual(['short: 0']);
    expect(gateway.calls[2].durable).toBe(true);
  });

  it('never sends a part settled while it waited (its producer closed), and fails a call unanswered past its timeout as timed out', async () => {
    const gateway = new AnsweringGateway();
    const coalescer = new EnqueueCoalescer(gateway);
    const closed = part(shardA, ['1']);
    const slow = part(shardA, ['2']);
    coalescer.add('s', { chunkSize: 4, timeoutMs: 20 }, closed);
    coalescer.add('s', { chunkSize: 4, timeoutMs: 20 }, slow);
    closed.settled = true;
    await afterTurn();
    expect(gateway.calls.map(({ call }) => tasksOf(call))).toEqual([[['2']]]);
    const deadline = Date.now() + 2_000;
    while (slow.heard.length === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 5));
    expect(slow.heard).toEqual(['timed out']);
  });
});
