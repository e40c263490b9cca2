import { describe, expect, it } from '@jest/globals';
import { SubscriberWatch, type SubscriberSocket } from '../../../lib/core/worker/subscriber-watch.js';
import { CapturingLogger } from './fakes.js';

/** The subscriber's socket, scripted: PINGs wait until the test answers them; cuts are counted. */
class ScriptedSocket implements SubscriberSocket {
  status = 'ready';
  cuts = 0;
  readonly pings: { answer: () => void; drop: () => void }[] = [];
  /** Which connection holds the subscriptions (a Cluster's subscriber node may change). */
  node = 1;
  private readonly nodes = new Map<number, ReturnType<SubscriberSocket['current']>>();

  current() {
    const known = this.nodes.get(this.node);
    if (known) {
      (known as { status: string }).status = this.status;
      return known;
    }
    const made = this.make();
    this.nodes.set(this.node, made);
    return made;
  }

  private make() {
    return {
      status: this.status,
      ping: () =>
        new Promise<'PONG'>((resolve, reject) => {
          this.pings.push({ answer: () => resolve('PONG'), drop: () => reject(new Error('Connection is closed.')) });
        }),
    } as unknown as ReturnType<SubscriberSocket['current']>;
  }

  cut(): void {
    this.cuts++;
  }
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

function watch(timeoutMs = 1_000) {
  const socket = new ScriptedSocket();
  const logger = new CapturingLogger();
  let recovered = 0;
  const subject = new SubscriberWatch(socket, timeoutMs, logger, 'w1', () => recovered++);
  return { socket, logger, subject, recovered: () => recovered };
}

describe('SubscriberWatch', () => {
  it('PINGs a ready subscriber, one PING at a time', async () => {
    const { socket, subject } = watch();
    subject.inspect(0);
    subject.inspect(400);
    expect(socket.pings).toHaveLength(1);
    socket.pings[0].answer();
    await settle();
    subject.inspect(500);
    expect(socket.pings).toHaveLength(2);
    expect(socket.cuts).toBe(0);
  });

  it('cuts the socket once a PING went unanswered past the timeout, logged once, then recovers when one is answered', async () => {
    const { socket, logger, subject, recovered } = watch(1_000);
    subject.inspect(0);
    subject.inspect(1_000);
    expect(socket.cuts).toBe(0); // not past the timeout yet
    subject.inspect(1_001);
    expect(socket.cuts).toBe(1);
    expect(logger.lines).toHaveLength(1);
    expect(logger.lines[0]).toMatch(
      /^error: The subscriber connection of worker w1 failed: no reply to PING for 1001 ms/,
    );
    // A new PING after the cut: its own time counts from when it was sent.
    subject.inspect(1_100);
    subject.inspect(2_100);
    expect(socket.cuts).toBe(1);
    expect(recovered()).toBe(0);
    // The old PING answered late (ioredis sent it again after reconnecting): not taken for the new one.
    socket.pings[0].answer();
    await settle();
    expect(recovered()).toBe(0);
    socket.pings[1].answer();
    await settle();
    expect(recovered()).toBe(1);
    expect(logger.lines[1]).toMatch(/^log: The subscriber connection of worker w1 recovered: it was down for \d+ ms$/);
    subject.inspect(2_200);
    socket.pings[2].answer();
    await settle();
    expect(recovered()).toBe(1); // told once per outage
  });

  it('sends nothing while ioredis is reconnecting the subscriber, and forgets a PING the drop failed', async () => {
    const { socket, subject } = watch(1_000);
    subject.inspect(0);
    socket.pings[0].drop();
    await settle();
    socket.status = 'reconnecting';
    subject.inspect(5_000);
    expect(socket.pings).toHaveLength(1);
    expect(socket.cuts).toBe(0);
    socket.status = 'ready';
    subject.inspect(5_100);
    expect(socket.pings).toHaveLength(2);
    subject.inspect(6_000);
    expect(socket.cuts).toBe(0);
  });

  it("makes every idle loop claim once when a Cluster's subscriptions moved to another node, at its first PING answered", async () => {
    const { socket, logger, subject, recovered } = watch(1_000);
    subject.inspect(0);
    socket.pings[0].answer();
    await settle();
    subject.inspect(500);
    socket.pings[1].answer();
    await settle();
    expect(recovered()).toBe(0); // the same node: nothing was missed
    socket.node = 2; // ioredis picked another subscriber node after its own went
    subject.inspect(1_000);
    expect(recovered()).toBe(0); // not before the new node answers
    socket.pings[2].answer();
    await settle();
    expect(recovered()).toBe(1);
    subject.inspect(1_500);
    socket.pings[3].answer();
    await settle();
    expect(recovered()).toBe(1);
    expect(socket.cuts).toBe(0);
    expect(logger.lines).toEqual([]); // no outage of its own: nothing logged
  });
});
