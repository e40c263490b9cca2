import { describe, expect, it } from '@jest/globals';
import { DeadLetterTaskError, NonRetryableTaskError, RetryTaskError } from '../../../lib/core/model/errors.js';
import type { TaskOutcomeEvent } from '../../../lib/core/model/outcomes.js';
import { TaskRunner } from '../../../lib/core/worker/runner.js';
import { loseLease } from '../../../lib/core/worker/running.js';
import type { TaskExecution, TaskOutcome, WorkerOptions } from '../../../lib/core/worker/worker-types.js';
import { claimed, envelope, executor, keys, parts, workerOptions } from './fakes.js';

/**
 * The runner, alone: decode, guard, execute, decide, settle, report, through every outcome, with a fake
 * gateway, a completer over a fake acknowledgement batch, and a scripted handler. No Redis, no Nest.
 */
function setup(
  answer: (execution: TaskExecution) => TaskOutcome | Promise<TaskOutcome>,
  options: Partial<WorkerOptions> = {},
) {
  const world = parts();
  const events: TaskOutcomeEvent[] = [];
  const handler = executor(answer);
  const runner = new TaskRunner(
    workerOptions({ onOutcome: (event) => events.push(event), ...options }),
    handler.run,
    world.completer,
    world.logger,
  );
  const runOne = async (task = claimed(world.gateway)) => {
    const run = world.running.begin(task.keys, task.token);
    await runner.run(task, run);
    world.running.end(run);
    return { task, run };
  };
  return { ...world, events, handler, runner, runOne };
}

describe('TaskRunner, one outcome at a time', () => {
  it('hands the handler the task (payload, attempt, ids), acknowledges a plain success riding on the claim loop, and reports it when the call answers', async () => {
    const world = setup(() => ({ status: 'succeeded' }));
    const acks = world.completer.shard(keys);
    acks.ridden(() => undefined);
    const { task } = await world.runOne(claimed(world.gateway, envelope({ id: 'plain-1' }), 1));
    expect(world.handler.seen[0]).toMatchObject({
      queue: 'mail.send',
      id: 'plain-1',
      clientId: 'acme',
      attempt: 2,
      maxAttempts: 3,
      payload: { to: 'ann@example.com' },
      expectsReply: false,
    });
    expect(world.batch.acks).toEqual([]); // nothing sent on its own: it rides
    expect(acks.unacknowledged).toEqual([task.token]);
    expect(world.events).toEqual([]); // reported once the claim call says the token was held
    const [[, answered]] = acks.take();
    answered(true);
    expect(world.events.map((event) => event.outcome)).toEqual(['completed']);
  });

  it("acknowledges a send() task in this turn's ackTasks call, with its reply and deduplication key", async () => {
    const world = setup(() => ({ status: 'succeeded', response: { total: 42 } }));
    world.completer.shard(keys).ridden(() => undefined);
    const { task } = await world.runOne(
      claimed(world.gateway, envelope({ id: 'quote-1', replyTo: 'unit:replies:c1', dedupKey: 'k' })),
    );
    expect(world.batch.acks).toEqual([
      {
        token: task.token,
        taskId: 'quote-1',
        deduplicationKey: 'k',
        reply: { channel: 'unit:replies:c1', message: JSON.stringify({ id: 'quote-1', response: { total: 42 } }) },
        resultTtlMs: 60_000,
      },
    ]);
    expect(world.events.map((event) => event.outcome)).toEqual(['completed']);
  });

  it('never starts the handler of a task revoked before it started (a cancel once its claim recorded it running), and reports it cancelled', async () => {
    const world = setup(() => ({ status: 'succeeded' }));
    const task = claimed(world.gateway, envelope({ id: 'early-1' }));
    const run = world.running.begin(task.keys, task.token);
    loseLease(run, { reason: 'changed my mind' });
    await world.runner.run(task, run);
    expect(world.handler.seen).toEqual([]);
    expect(world.events.map((event) => event.outcome)).toEqual(['cancelled']);
    expect(world.batch.acks).toEqual([]);
  });

  it('acknowledges a plain success on its own when no claim loop takes acknowledgements for its shard', async () => {
    const world = setup(() => ({ status: 'succeeded' }));
    await world.runOne();
    expect(world.batch.acks).toHaveLength(1);
  });

  it("retries a failure after the policy's backoff, attempt counted, and dead-letters it on the last attempt (reason failed)", async () => {
    const world = setup(() => ({ status: 'failed', error: new Error('smtp down') }));
    await world.runOne(claimed(world.gateway, envelope(), 0));
    await world.runOne(claimed(world.gateway, envelope(), 2));
    expect(world.gateway.calls.map((call) => call.script)).toEqual(['retryTask', 'deadLetterTask']);
    expect(world.gateway.calls[0].detail).toBe(100);
    expect(world.gateway.calls[1].detail).toMatchObject({
      reason: 'failed',
      attempts: 3,
      error: { message: 'smtp down' },
    });
    expect(world.events.map((event) => [event.outcome, event.attempt])).toEqual([
      ['retried', 1],
      ['dead-lettered', 3],
    ]);
  });

  it('dead-letters a NonRetryableTaskError at once', async () => {
    const world = setup(() => ({ status: 'failed', error: new NonRetryableTaskError('bad address') }));
    await world.runOne();
    expect(world.gateway.calls).toMatchObject([
      { script: 'deadLetterTask', detail: { reason: 'failed', attempts: 1 } },
    ]);
  });

  it("follows what the handler decides: a RetryTaskError's delay, ctx.retry(), ctx.deadLetter(reason), a DeadLetterTaskError", async () => {
    const thrown = setup(() => ({ status: 'failed', error: new RetryTaskError('greylisted', { delayMs: 7_000 }) }));
    await thrown.runOne();
    expect(thrown.gateway.calls).toMatchObject([{ script: 'retryTask', detail: 7_000 }]);
    expect(thrown.logger.lines).toEqual([
      expect.stringMatching(
        /^log: task task-1 of "mail.send" runs again in 7000 ms at its handler's request \(greylisted\)/,
      ),
    ]);

    const asked = setup((execution) => {
      execution.control.retry({ delayMs: 5 });
      return { status: 'succeeded' };
    });
    await asked.runOne();
    expect(asked.gateway.calls).toMatchObject([{ script: 'retryTask', detail: 5 }]);

    const rejected = setup((execution) => {
      execution.control.deadLetter('no such user');
      throw new Error('what the handler threw after deciding does not change the decision');
    });
    await rejected.runOne();
    const record = rejected.gateway.calls[0].detail as { reason: string; detail: string; error: { stack?: string } };
    expect(record).toMatchObject({ reason: 'rejected', detail: 'no such user' });
    expect(record.error.stack).toBeUndefined(); // made by the library: no stack of its frames
    expect(rejected.logger.lines).toEqual([
      expect.stringMatching(/^warn: .*at its handler's request \(reason rejected\): no such user$/),
    ]);

    const thrownDead = setup(() => ({ status: 'failed', error: new DeadLetterTaskError('closed for good') }));
    await thrownDead.runOne();
    expect(thrownDead.gateway.calls[0].detail).toMatchObject({ reason: 'rejected', detail: 'closed for good' });
  });

  it('sets aside an entry it cannot read (malformed) and one of another format version, without running a handler', async () => {
    const world = setup(() => ({ status: 'succeeded' }));
    await world.runOne(claimed(world.gateway, '0|{not json'));
    await world.runOne(
      claimed(world.gateway, '0|{"v":99,"id":"future-1","clientId":"a","enqueuedAt":1,"payload":null}'),
    );
    expect(world.handler.seen).toEqual([]);
    expect(world.gateway.calls.map((call) => (call.detail as { reason: string }).reason)).toEqual([
      'malformed',
      'unsupported-version',
    ]);
  });

  it('does not start an expired task, nor one whose attempts interrupted runs used up', async () => {
    const world = setup(() => ({ status: 'succeeded' }));
    await world.runOne(claimed(world.gateway, envelope({ expiresAt: Date.now() - 1 })));
    await world.runOne(claimed(world.gateway, envelope(), 3));
    expect(world.handler.seen).toEqual([]);
    expect(world.gateway.calls.map((call) => (call.detail as { reason: string }).reason)).toEqual([
      'expired',
      'interrupted',
    ]);
  });

  it('completes a send() task whose result is not JSON (its work is done); the caller hears UnserializableResultError naming where', async () => {
    const circular: Record<string, unknown> = { items: [] };
    (circular.items as unknown[]).push({ parent: circular });
    const world = setup(() => ({ status: 'succeeded', response: circular }));
    world.completer.shard(keys).ridden(() => undefined);
    await world.runOne(claimed(world.gateway, envelope({ id: 'q-9', replyTo: 'unit:replies:c1' })));
    // Not retried, not dead-lettered: requeueing it would only run its side effects again.
    expect(world.gateway.calls.filter((call) => call.script !== 'startTasks')).toEqual([]);
    expect(world.batch.acks).toHaveLength(1);
    const reply = JSON.parse(world.batch.acks[0].reply?.message ?? '{}') as { err?: Record<string, unknown> };
    expect(reply.err).toMatchObject({
      name: 'UnserializableResultError',
      code: 'UNSERIALIZABLE_RESULT',
      taskId: 'q-9',
      detail: expect.stringContaining('result.items[0].parent (a circular reference)'),
    });
    expect(world.events.map((event) => event.outcome)).toEqual(['completed']);
  });

  it('discards the outcome of a run whose lease was lost while it ran, and of one after shutdown gave the tasks back', async () => {
    let lose: (() => void) | undefined;
    const world = setup(() => {
      lose?.();
      return { status: 'succeeded' };
    });
    const task = claimed(world.gateway);
    const run = world.running.begin(task.keys, task.token);
    lose = () => loseLease(run);
    await world.runner.run(task, run);
    expect(run.abort.signal.aborted).toBe(true);
    expect(world.batch.acks).toEqual([]);
    expect(world.events.map((event) => event.outcome)).toEqual(['lease-lost']);

    lose = () => world.completer.release();
    await world.runOne();
    expect(world.batch.acks).toEqual([]);
    expect(world.logger.lines.filter((line) => line.includes('after this worker gave it up'))).toHaveLength(2);
  });

  it('reports lease-lost when the fenced settle finds the token gone, and keeps retrying a settle Redis failed', async () => {
    const world = setup(() => ({ status: 'failed', error: new Error('boom') }));
    world.gateway.answers = [false];
    await world.runOne();
    expect(world.events.map((event) => event.outcome)).toEqual(['lease-lost']);

    const flaky = setup(() => ({ status: 'failed', error: new Error('boom') }));
    flaky.gateway.answers = [new Error('connection lost'), true];
    await flaky.runOne();
    expect(flaky.gateway.calls.map((call) => call.script)).toEqual(['retryTask', 'retryTask']);
    expect(flaky.events.map((event) => event.outcome)).toEqual(['retried']);
    expect(flaky.logger.lines[0]).toMatch(
      /^error: could not settle a task of "mail.send" \(connection lost\); retrying$/,
    );
  });

  it('abandons a handler past its timeout as failed (HandlerTimeoutError), and keeps a listener that throws from touching the task', async () => {
    const world = setup(() => new Promise<TaskOutcome>(() => undefined), {
      patterns: {
        ...workerOptions().patterns,
        handlerTimeout: () => 20,
        retryPolicy: () => ({ maxAttempts: 1, backoff: workerOptions().patterns.retryPolicy('mail.send').backoff }),
      },
      onOutcome: () => {
        throw new Error('listener bug');
      },
    });
    await world.runOne();
    expect(world.gateway.calls[0].detail).toMatchObject({ reason: 'timeout', error: { name: 'HandlerTimeoutError' } });
    expect(world.logger.lines.some((line) => line === 'error: a task outcome listener threw: listener bug')).toBe(true);
  });
});
