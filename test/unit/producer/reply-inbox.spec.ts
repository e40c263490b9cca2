import { describe, expect, it } from '@jest/globals';
import { ClosedError, DuplicateTaskError, ReplyTimeoutError, TaskFailedError } from '../../../lib/core/model/errors.js';
import type { PreparedTask } from '../../../lib/core/model/prepared-task.js';
import { QueueKeys } from '../../../lib/core/redis/keys.js';
import type { EnqueueAnswer } from '../../../lib/core/producer/producer-types.js';
import {
  ReplyInbox,
  type ReplyAnswer,
  type ReplyRoute,
  type ReplySubscription,
} from '../../../lib/core/producer/replies.js';
import type { EnqueueItem } from '../../../lib/core/producer/task-items.js';
import { CapturingLogger } from '../worker/fakes.js';

const keys = new QueueKeys('unit', 'report.build');

/** The reply route, scripted: the test publishes replies, answers subscribe calls, and sees cancels. */
class ScriptedRoute implements ReplyRoute {
  onReply: ((message: string) => void) | undefined;
  onResubscribed: (() => void) | undefined;
  readonly stored = new Map<string, string>();
  readonly cancelled: string[] = [];
  cancelAnswer = true;
  subscriptions = 0;
  closedSubscriptions = 0;
  /** Set to hold subscribe calls until the test lets them through. */
  gate: Promise<void> | undefined;

  async subscribe(
    _channel: string,
    onReply: (message: string) => void,
    onResubscribed: () => void,
  ): Promise<ReplySubscription> {
    this.subscriptions++;
    await this.gate;
    this.onReply = onReply;
    this.onResubscribed = onResubscribed;
    return {
      close: () => {
        this.closedSubscriptions++;
        return Promise.resolve();
      },
    };
  }

  storedReply(_queue: string, _clientId: string, id: string): Promise<string | null> {
    return Promise.resolve(this.stored.get(id) ?? null);
  }

  cancel(_keys: QueueKeys, task: PreparedTask): Promise<boolean> {
    this.cancelled.push(task.id);
    return Promise.resolve(this.cancelAnswer);
  }

  publish(reply: object): void {
    this.onReply?.(JSON.stringify(reply));
  }
}

/** The producer, scripted: it records each enqueue and answers as the test says (written by default). */
class ScriptedProducer {
  readonly enqueued: { queue: string; item: EnqueueItem }[] = [];
  answer: (item: EnqueueItem, to: EnqueueAnswer) => void = (item, to) =>
    to.written({ id: item.id ?? 'none', duplicate: false });

  enqueueOneTo(queue: string, item: EnqueueItem, to: EnqueueAnswer): void {
    this.enqueued.push({ queue, item });
    this.answer(item, to);
  }
}

function inboxWith(options: { replyTimeoutMs?: number; cancelOnReplyTimeout?: boolean } = {}) {
  const route = new ScriptedRoute();
  const producer = new ScriptedProducer();
  const inbox = new ReplyInbox(
    route,
    producer,
    'unit:replies:client-1',
    { replyTimeoutMs: options.replyTimeoutMs ?? 0, cancelOnReplyTimeout: options.cancelOnReplyTimeout ?? false },
    new CapturingLogger(),
    (queue, why) => new Error(`cannot reach Redis for "${queue}": ${why}`),
  );
  return { inbox, route, producer };
}

/** One send(): its answers, as the caller hears them (at most one, checked by the tests). */
function send(inbox: ReplyInbox, id: string, deadline = Date.now() + 1_000) {
  const answers: ReplyAnswer[] = [];
  const item = { id, payload: { n: 1 }, clientId: 'acme', replyTo: 'unit:replies:client-1' };
  const stop = inbox.send('report.build', item, deadline, (answer) => answers.push(answer));
  return { answers, stop };
}

async function until(what: string, check: () => boolean): Promise<void> {
  const deadline = Date.now() + 2_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

function preparedTask(id: string): PreparedTask {
  return { id } as PreparedTask;
}

describe('ReplyInbox with a scripted route and producer (no Redis)', () => {
  it('subscribes before the first task is written, answers each caller once with its result, and ignores what comes after', async () => {
    const { inbox, route, producer } = inboxWith();
    let release!: () => void;
    route.gate = new Promise((resolve) => (release = resolve));
    const first = send(inbox, 'task-1');
    expect(producer.enqueued).toEqual([]); // no reply could be heard yet: nothing is written
    release();
    await until('the enqueue after the subscription', () => producer.enqueued.length === 1);
    expect(producer.enqueued[0].item).toMatchObject({ id: 'task-1', replyTo: 'unit:replies:client-1' });
    const second = send(inbox, 'task-2');
    expect(producer.enqueued).toHaveLength(2); // subscribed: written at once
    route.publish({ id: 'task-2', response: { rows: 2 } });
    route.publish({ id: 'task-1', response: null });
    route.publish({ id: 'task-1', response: 'again' });
    expect(first.answers).toEqual([{ response: null }]);
    expect(second.answers).toEqual([{ response: { rows: 2 } }]);
    expect(route.subscriptions).toBe(1);
    await inbox.close();
  });

  it("gives a failed handler's error record to its caller as a TaskFailedError with its fields", async () => {
    const { inbox, route, producer } = inboxWith();
    const call = send(inbox, 'task-1');
    await until('the enqueue', () => producer.enqueued.length === 1);
    const err = {
      name: 'Error',
      message: 'disk full',
      taskId: 'task-1',
      pattern: 'report.build',
      attempt: 3,
      reason: 'exhausted',
    };
    route.publish({ id: 'task-1', err });
    const [answer] = call.answers as { err: TaskFailedError }[];
    expect(answer.err).toBeInstanceOf(TaskFailedError);
    expect(answer.err).toMatchObject({
      taskId: 'task-1',
      attempt: 3,
      reason: 'exhausted',
      message: expect.stringContaining('disk full'),
    });
    await inbox.close();
  });

  it('answers a refused duplicate with DuplicateTaskError, and an enqueue that failed with its error', async () => {
    const { inbox, producer } = inboxWith();
    producer.answer = (item, to) =>
      item.id === 'dup' ? to.written({ id: 'holder-7', duplicate: true }) : to.failed(new Error('not written'));
    const duplicate = send(inbox, 'dup');
    const failed = send(inbox, 'lost');
    await until('both answers', () => duplicate.answers.length + failed.answers.length === 2);
    const [dup] = duplicate.answers as { err: DuplicateTaskError }[];
    expect(dup.err).toBeInstanceOf(DuplicateTaskError);
    expect(dup.err.holderId).toBe('holder-7');
    expect(failed.answers).toEqual([{ err: new Error('not written') }]);
    await inbox.close();
  });

  it('times a caller out after replyTimeoutMs, cancelling its task when asked to, and says whether it was', async () => {
    const { inbox, route, producer } = inboxWith({ replyTimeoutMs: 40, cancelOnReplyTimeout: true });
    const sentAt = Date.now();
    const call = send(inbox, 'task-1');
    await until('the enqueue', () => producer.enqueued.length === 1);
    inbox.handed(keys, preparedTask('task-1'));
    await until('the timeout', () => call.answers.length === 1);
    expect(Date.now() - sentAt).toBeGreaterThanOrEqual(40); // never before its timeout
    const [answer] = call.answers as { err: ReplyTimeoutError }[];
    expect(answer.err).toBeInstanceOf(ReplyTimeoutError);
    expect(answer.err.cancelled).toBe(true);
    expect(route.cancelled).toEqual(['task-1']);
    route.publish({ id: 'task-1', response: 'late' });
    expect(call.answers).toHaveLength(1); // a late reply reaches nobody
    await inbox.close();
  });

  it('reads back the replies published while its subscriber was away, once it is subscribed again', async () => {
    const { inbox, route, producer } = inboxWith();
    const call = send(inbox, 'task-1');
    await until('the enqueue', () => producer.enqueued.length === 1);
    route.stored.set('task-1', JSON.stringify({ id: 'task-1', response: 'stored' }));
    route.onResubscribed?.();
    await until('the stored reply', () => call.answers.length === 1);
    expect(call.answers).toEqual([{ response: 'stored' }]);
    await inbox.close();
  });

  it('on close, answers every waiting caller with ClosedError and closes the subscription, one under way included', async () => {
    const { inbox, route, producer } = inboxWith();
    const call = send(inbox, 'task-1');
    await until('the enqueue', () => producer.enqueued.length === 1);
    await inbox.close();
    expect(call.answers).toHaveLength(1);
    expect((call.answers[0] as { err: unknown }).err).toBeInstanceOf(ClosedError);
    expect(route.closedSubscriptions).toBe(1);

    // A subscription that lands after close() is closed, not kept.
    let release!: () => void;
    route.gate = new Promise((resolve) => (release = resolve));
    const late = send(inbox, 'task-2');
    await inbox.close();
    release();
    await until('the late subscription to close', () => route.closedSubscriptions === 2);
    expect(inbox.isSubscribed).toBe(false);
    expect((late.answers[0] as { err: unknown }).err).toBeInstanceOf(ClosedError);
  });

  it('tells the caller nothing was written when the channel cannot be subscribed by its deadline', async () => {
    const { inbox, route, producer } = inboxWith();
    route.gate = new Promise(() => undefined); // never subscribes
    const call = send(inbox, 'task-1', Date.now() + 30);
    await until('the answer', () => call.answers.length === 1);
    expect(producer.enqueued).toEqual([]);
    expect(String((call.answers[0] as { err: unknown }).err)).toMatch(/the reply channel could not be subscribed/);
    await inbox.close();
  });
});
