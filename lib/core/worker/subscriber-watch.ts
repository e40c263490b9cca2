import type { Redis } from 'ioredis';
import { forceReconnect, subscribedNode } from '../redis/connection.js';
import type { RedisConnection } from '../redis/scripts.js';
import { OutageReporter, type TaskLogger } from '../support/logger.js';

/** How the watch reaches the socket that holds the subscriptions (a unit test scripts it). */
export interface SubscriberSocket {
  /** The connection holding the subscriptions now (on a Cluster, ioredis's subscriber node), if any. */
  current(): Pick<Redis, 'status' | 'ping'> | undefined;
  /** Cuts that socket: ioredis reconnects it (on a Cluster, picks a subscriber node) and subscribes again. */
  cut(): void;
}

/** The subscriber socket of a connection as ioredis runs it. */
export function subscriberSocket(connection: RedisConnection): SubscriberSocket {
  return {
    current: () => subscribedNode(connection),
    cut: () => {
      const node = subscribedNode(connection);
      if (node) forceReconnect(node);
    },
  };
}

/**
 * Watches the process's one subscriber connection, which nothing else would: when it goes half-open (a
 * partition, a failover that left its socket hanging) no error ever comes, and the wake messages, due
 * times and resumes it carries are lost in silence, so idle claim loops would wait for their backstop
 * (`blockTimeoutMs`). It PINGs the subscriber (allowed in subscriber mode) every half `timeoutMs` unless
 * one is unanswered; one unanswered for `timeoutMs` cuts the socket (ioredis reconnects and subscribes
 * again), logged once, and the first PING answered after that logs the recovery and calls `recovered`
 * (every idle loop claims once: what was published meanwhile was not heard). On a Cluster, ioredis moves
 * the subscriptions to another node by itself when theirs goes (a failover) and tells nobody: the first
 * PING the new node answers calls `recovered` too. One PING per half `timeoutMs` per process, whatever the
 * number of patterns.
 */
export class SubscriberWatch {
  private timer: NodeJS.Timeout | undefined;
  /** When the unanswered PING was sent (Date.now() ms), if one is. */
  private sentAt: number | undefined;
  /** The socket the last PING went to, and whether it replaced another (a Cluster's subscriber moved). */
  private pinged: object | undefined;
  private moved = false;
  private readonly outage: OutageReporter;

  constructor(
    private readonly socket: SubscriberSocket,
    private readonly timeoutMs: number,
    logger: TaskLogger,
    workerId: string,
    private readonly recovered: () => void,
  ) {
    this.outage = new OutageReporter(logger, `The subscriber connection of worker ${workerId}`);
  }

  start(): void {
    this.timer = setInterval(() => this.inspect(), Math.max(25, Math.floor(this.timeoutMs / 2)));
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** One look (the timer's every tick): a PING sent, or an unanswered one past its time cut. */
  inspect(now = Date.now()): void {
    const current = this.socket.current();
    if (current?.status !== 'ready') {
      this.sentAt = undefined; // ioredis is connecting it: a PING would wait in its queue, not on the socket
      return;
    }
    if (this.sentAt === undefined) {
      const sentAt = now;
      this.sentAt = sentAt;
      if (this.pinged !== undefined && this.pinged !== current) this.moved = true;
      this.pinged = current;
      const answered = () => {
        if (this.sentAt !== sentAt) return;
        this.sentAt = undefined;
        if (!this.outage.down && !this.moved) return;
        this.moved = false;
        this.outage.succeeded();
        this.recovered();
      };
      current.ping().then(answered, () => {
        if (this.sentAt === sentAt) this.sentAt = undefined; // the connection dropped: ioredis reconnects it
      });
      return;
    }
    const waited = now - this.sentAt;
    if (waited > this.timeoutMs) {
      this.outage.failed(
        new Error(
          `no reply to PING for ${waited} ms on a connection that looks open (half-open, or a stalled server); wake messages, due times and resumes are not heard; reconnecting it`,
        ),
      );
      this.sentAt = undefined;
      this.socket.cut();
    }
  }
}
