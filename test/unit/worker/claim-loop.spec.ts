import { describe, expect, it } from '@jest/globals';
import type { ClaimReply, ClaimRequest } from '../../../lib/core/redis/gateway.js';
import { ClaimAcks } from '../../../lib/core/worker/claim-acks.js';
import { ClaimLoop, type ClaimLoopHooks } from '../../../lib/core/worker/claim-loop.js';
import type { WaitEnd } from '../../../lib/core/worker/idle-wait.js';
import { Slots } from '../../../lib/core/worker/slots.js';
import { CapturingLogger, keys } from './fakes.js';

/** The claim script, scripted: each call answers the next reply the test queued (or "nothing left"). */
class ScriptedClaims {
  readonly requests: ClaimRequest[] = [];
  readonly replies: (ClaimReply | Error | Promise<ClaimReply>)[] = [];

  /** The calls and idle waits in the order they were made (see ScriptedIdle). */
  readonly log: string[] = [];

  claim(_keys: unknown, request: ClaimRequest): Promise<ClaimReply> {
    this.requests.push(request);
    this.log.push(`claim ${request.wanted} [${request.acks.join(',')}]`);
    const reply = this.replies.shift() ?? claimed([], true);
    return reply instanceof Error ? Promise.reject(reply) : Promise.resolve(reply);
  }
}

/** The idle wait, scripted: it blocks until the test wakes it (with the reply of the claim behind it) or it is cut. */
class ScriptedIdle {
  readonly requests: ClaimRequest[] = [];
  readonly connection = 'blocking';
  private pending: ((end: WaitEnd | undefined) => void) | undefined;

  /** @param onConnection the claims of the wait's connection: what it sends ahead of the wait goes there. */
  constructor(private readonly onConnection: ScriptedClaims) {}

  get waiting(): boolean {
    return this.pending !== undefined;
  }

  wait(
    request: ClaimRequest,
    signal: AbortSignal,
    first?: (gateway: Pick<ScriptedClaims, 'claim'>) => void,
  ): Promise<WaitEnd | undefined> {
    first?.(this.onConnection);
    this.onConnection.log.push('wait');
    this.requests.push(request);
    return new Promise((resolve) => {
      this.pending = resolve;
      signal.addEventListener('abort', () => resolve(undefined), { once: true });
    });
  }

  wake(reply: ClaimReply): void {
    const pending = this.pending;
    this.pending = undefined;
    pending?.({ claim: { status: 'fulfilled', value: reply } });
  }

  cut(): void {
    this.cuts++;
    this.pending?.(undefined);
    this.pending = undefined;
  }

  cuts = 0;
}

function claimed(tokens: string[], drained = false, lost: string[] = []): ClaimReply {
  const pairs = tokens.flatMap((token) => [token, `entry-of-${token}`]);
  return { lost, outcome: { kind: 'claimed', pairs }, drained, started: [] };
}

async function until(what: string, check: () => boolean): Promise<void> {
  const deadline = Date.now() + 3_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

function loopWith(options: { concurrency?: number; prefetch?: number } = {}) {
  const gateway = new ScriptedClaims();
  const idle = new ScriptedIdle(gateway);
  const acks = new ClaimAcks();
  const pool = new Slots(options.concurrency ?? 4);
  const slots = pool.forPattern();
  const dispatched: string[] = [];
  /** The tokens the claim said it recorded running (tracked tasks started without a startTasks call). */
  const recorded: string[] = [];
  const events: string[] = [];
  const hooks: ClaimLoopHooks = {
    onClaimed: (token, _entry, wasRecorded, keep) => {
      dispatched.push(token);
      if (wasRecorded) recorded.push(keep === undefined ? token : `${token} keep ${keep}`);
    },
    register: () => {
      events.push('register');
      return Promise.resolve();
    },
    onThrottled: (dueAt) => events.push(`throttled until ${dueAt}`),
    giveBack: (pairs) => events.push(`gave back ${pairs.filter((_, i) => i % 2 === 0).join(',')}`),
  };
  const loop = new ClaimLoop(
    { gateway, idle, downSince: () => undefined },
    keys,
    acks,
    slots,
    {
      workerId: 'unit-worker',
      prefetch: options.prefetch ?? 10,
      blockTimeoutMs: 5_000,
      clientConcurrency: 0,
      leaseMs: 30_000,
      heartbeatIntervalMs: 5_000,
    },
    hooks,
    new CapturingLogger(),
  );
  return { loop, gateway, idle, acks, slots, pool, dispatched, recorded, events };
}

/**
 * A loop of concurrency 1 whose first claim takes `token` and leaves the queue drained, `replies` answering the calls
 * after it; then the task's run ends (its acknowledgement queued, its slot free). What its waiter hears is collected.
 */
async function drainedRunEnded(token: string, ...replies: (ClaimReply | Error | Promise<ClaimReply>)[]) {
  const setup = loopWith({ concurrency: 1 });
  setup.gateway.replies.push(claimed([token], true), ...replies);
  setup.loop.start();
  await until('the task', () => setup.dispatched.length === 1);
  const heard: boolean[] = [];
  setup.acks.add(token, (held) => heard.push(held));
  setup.slots.release();
  return { ...setup, heard };
}

describe('ClaimLoop with a scripted claim script and idle wait (no Redis)', () => {
  it('claims as many tasks as slots are free, dispatches each, and releases the slots a claim did not fill', async () => {
    const { loop, gateway, idle, slots, dispatched } = loopWith({ concurrency: 4 });
    gateway.replies.push(claimed(['t1', 't2']));
    loop.start();
    await until('the idle wait', () => idle.waiting);
    expect(gateway.requests[0]).toMatchObject({ workerId: 'unit-worker', wanted: 4, acks: [] });
    expect(dispatched).toEqual(['t1', 't2']);
    expect(slots.used).toBe(2); // the two running tasks hold theirs; the rest went back
    // The call after them found nothing (the script's default): the loop blocks, asking for what is free.
    expect(idle.requests[0]).toMatchObject({ wanted: 2 });
    await loop.close();
  });

  it('tells the worker which claimed tasks the claim recorded running, by their places in the reply, with their keeps', async () => {
    const { loop, gateway, dispatched, recorded } = loopWith({ concurrency: 4 });
    gateway.replies.push({ ...claimed(['t1', 't2', 't3', 't4']), started: [2, 4], keeps: ['5000', ''] });
    loop.start();
    await until('the four tasks', () => dispatched.length === 4);
    expect(dispatched).toEqual(['t1', 't2', 't3', 't4']);
    // A keep that was not a positive integer ('') is none: that success reads its index.
    expect(recorded).toEqual(['t2 keep 5000', 't4']);
    await loop.close();
  });

  it('wakes from the idle wait straight into the tasks the claim behind it took, giving back what found no slot', async () => {
    const { loop, idle, pool, dispatched, events } = loopWith({ concurrency: 2 });
    loop.start();
    await until('the idle wait', () => idle.waiting);
    expect(idle.requests[0]).toMatchObject({ wanted: 2 });
    pool.forPattern().take(1); // another queue's loop took a slot meanwhile
    idle.wake(claimed(['w1', 'w2']));
    await until('the woken task', () => dispatched.length === 1);
    expect(dispatched).toEqual(['w1']);
    expect(events).toContain('gave back w2');
    await loop.close();
  });

  it('sends the acknowledgements queued meanwhile on the next claim call, and tells each waiter whether its token was held', async () => {
    const { loop, gateway, idle, acks, slots, dispatched } = loopWith({ concurrency: 1 });
    gateway.replies.push(claimed(['t1']));
    loop.start();
    await until('the first task', () => dispatched.length === 1);
    const heard: string[] = [];
    gateway.replies.push(claimed(['t2'], false, ['t0-lost']));
    // The run of t1 ends: its slot frees and its acknowledgement rides on the next call, with one that lost its lease.
    acks.add('t1', (held) => heard.push(`t1 ${held}`));
    acks.add('t0-lost', (held) => heard.push(`t0-lost ${held}`));
    slots.release();
    await until('the second task', () => dispatched.length === 2);
    const call = gateway.requests.find((request) => request.acks.length > 0);
    expect(call).toMatchObject({ wanted: 1, acks: ['t1', 't0-lost'] });
    expect(heard).toEqual(['t1 true', 't0-lost false']);
    slots.release();
    await until('the idle wait', () => idle.waiting);
    await loop.close();
  });

  it("sends the acknowledgements queued as it goes idle ahead of its wait, on the wait's connection (no call of their own)", async () => {
    // The queue was drained: the loop waits, the acknowledgement ahead.
    const { loop, gateway, idle, heard } = await drainedRunEnded('t1');
    await until('the idle wait', () => idle.waiting);
    await until('the answer', () => heard.length === 1);
    expect(heard).toEqual([true]);
    // The call that claimed t1, then the acknowledgement made by the wait as it began (on its connection), then the wait.
    expect(gateway.log).toEqual(['claim 1 []', 'claim 0 [t1]', 'wait']);
    await loop.close();
  });

  it('lets acknowledgements sent ahead of its wait be answered before closing cuts that connection; one that failed is sent again on its own', async () => {
    let answer!: (reply: ClaimReply) => void;
    const { loop, idle, heard } = await drainedRunEnded('t1', new Promise<ClaimReply>((resolve) => (answer = resolve)));
    await until('the idle wait', () => idle.waiting);
    const closed = loop.close();
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(idle.cuts).toBe(0); // its acknowledgement is not answered yet
    answer(claimed([], true));
    await closed;
    expect(idle.cuts).toBe(1);
    expect(heard).toEqual([true]);

    const failing = await drainedRunEnded('t2', new Error('connection reset'));
    await until('the answer', () => failing.heard.length === 1);
    expect(failing.heard).toEqual([true]);
    // Ahead of the wait (failed), then on its own (the loop still waits).
    expect(failing.gateway.requests.filter((request) => request.acks.includes('t2'))).toHaveLength(2);
    expect(failing.idle.waiting).toBe(true);
    await failing.loop.close();
  });

  it('keeps acknowledgements through a failed call and sends them again on the next one', async () => {
    const { loop, gateway, idle, acks } = loopWith({ concurrency: 1 });
    const heard: boolean[] = [];
    acks.add('t1', (held) => heard.push(held));
    gateway.replies.push(new Error('connection reset'));
    loop.start();
    await until('the retry after the failure', () => gateway.requests.length >= 2);
    expect(gateway.requests[0].acks).toEqual(['t1']);
    expect(gateway.requests[1].acks).toEqual(['t1']); // put back, then sent again
    await until('the answer', () => heard.length === 1);
    expect(heard).toEqual([true]);
    await until('the idle wait', () => idle.waiting);
    await loop.close();
  });

  it('registers again when the script says the worker is not registered, and claims after', async () => {
    const { loop, gateway, idle, events, dispatched } = loopWith();
    gateway.replies.push({ lost: [], outcome: { kind: 'unregistered' }, drained: false, started: [] }, claimed(['t1']));
    loop.start();
    await until('the task', () => dispatched.length === 1);
    expect(events).toEqual(['register']);
    await until('the idle wait', () => idle.waiting);
    await loop.close();
  });

  it('claims nothing while the queue is paused (both calls under way share one wait), and claims again at once on a resume', async () => {
    const { loop, gateway, idle, dispatched, slots } = loopWith({ concurrency: 2 });
    const paused: ClaimReply = { lost: [], outcome: { kind: 'paused' }, drained: false, started: [] };
    gateway.replies.push(paused, paused);
    loop.start();
    await until('both calls to find the queue paused', () => gateway.requests.length === 2);
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(gateway.requests).toHaveLength(2); // waiting out the pause (5 s here), not polling
    expect(slots.used).toBe(0); // a paused loop holds no slot
    loop.resume();
    // Both paused calls claimed nothing: the loop claims again through its wait, which returns at once
    // when the ring holds a client (BLMOVE), the claim queued behind it taking the task.
    await until('the claim after the resume', () => idle.requests.length === 1);
    idle.wake(claimed(['t1']));
    await until('the task after the resume', () => dispatched.length === 1);
    await loop.close();
  });

  it('reports a rate-limited client to be put back when its token is due', async () => {
    const { loop, gateway, idle, events } = loopWith();
    gateway.replies.push({
      lost: [],
      outcome: { kind: 'claimed', pairs: [] },
      throttledUntil: 12_345,
      drained: true,
      started: [],
    });
    loop.start();
    await until('the idle wait', () => idle.waiting);
    expect(events).toContain('throttled until 12345');
    await loop.close();
  });

  it('on close, stops claiming and sends what is still queued in a call that claims nothing', async () => {
    const { loop, gateway, idle, acks } = loopWith();
    loop.start();
    await until('the idle wait', () => idle.waiting);
    const heard: boolean[] = [];
    const closed = loop.close();
    acks.add('t9', (held) => heard.push(held));
    await closed;
    await until('the flush', () => heard.length === 1);
    const last = gateway.requests[gateway.requests.length - 1];
    expect(last).toMatchObject({ wanted: 0, acks: ['t9'] });
    expect(heard).toEqual([true]);
  });
});
