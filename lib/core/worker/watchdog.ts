import { forceReconnect, retryingAfterLoss, watchOf } from '../redis/connection.js';
import type { QueueKeys } from '../redis/keys.js';
import type { RedisConnection, TaskRedis } from '../redis/scripts.js';
import { errorMessage, OutageReporter, type TaskLogger } from '../support/logger.js';
import type { ClaimLoop } from './claim-loop.js';
import type { Lease } from './lease.js';
import type { RunningTasks } from './running.js';
import type { WorkerOptions } from './worker-types.js';

/** A shard's claim loop and the connection it blocks on. */
export interface WatchedLoop {
  readonly loop: ClaimLoop;
  readonly blocking: RedisConnection;
}

/** What the watchdog reads of a claim loop (a unit test scripts it). */
export interface LoopHealth {
  readonly loop: Pick<ClaimLoop, 'died' | 'restart' | 'overdue'>;
  readonly blocking: RedisConnection;
}

/**
 * How the watchdog sees and acts on connections: the worker's command connection, when a connection
 * became ready last, whether ioredis is already reconnecting it, and a forced reconnection.
 */
export interface WatchedConnections {
  readonly command: RedisConnection;
  readySince(connection: RedisConnection): number | undefined;
  retryingAfterLoss(connection: RedisConnection, now: number, withinMs: number): boolean;
  reconnect(connection: RedisConnection): void;
}

/** The connections as ioredis runs them. */
export function liveConnections(command: TaskRedis): WatchedConnections {
  return {
    command,
    readySince: (connection) => watchOf(connection).readySince,
    retryingAfterLoss,
    reconnect: forceReconnect,
  };
}

/**
 * The worker's watchdog: restarts a claim loop that ended unexpectedly, and when Redis has not answered
 * a loop's (or the heartbeat's) command for `watchdogTimeoutMs` past what it may take, cuts that
 * connection so ioredis reconnects and sends the command again (a half-open TCP connection, a failover
 * that left a socket hanging). Nothing else notices those: no error is ever raised. It also warns once
 * about each run going on past `slowRunMs`.
 */
export class Watchdog {
  private timer: NodeJS.Timeout | undefined;
  private stalled = false;
  /** Reported once when a stall is found, and once when Redis answers again. */
  private readonly stall: OutageReporter;
  // table-ok: one entry per connection
  private readonly reconnectedAt = new Map<RedisConnection, number>();

  private readonly redis: RedisConnection;

  constructor(
    private readonly connections: WatchedConnections,
    private readonly loops: ReadonlyMap<QueueKeys, LoopHealth>,
    private readonly lease: Pick<Lease, 'beatingFor'>,
    private readonly running: Pick<RunningTasks, 'warnSlow'>,
    private readonly options: WorkerOptions,
    private readonly logger: TaskLogger,
    downSince: () => number | undefined,
  ) {
    this.redis = connections.command;
    this.stall = new OutageReporter(logger, `Redis, as the watchdog of worker ${options.workerId} sees it,`, downSince);
  }

  start(): void {
    this.timer = setInterval(() => this.inspect(), Math.min(1_000, Math.max(25, this.options.watchdogTimeoutMs / 4)));
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** One look at the loops and the heartbeat (the timer's every tick). */
  inspect(now = Date.now()): void {
    this.running.warnSlow(now, this.options.slowRunMs, this.logger);
    let stalled = false;
    for (const [keys, { loop, blocking }] of this.loops) {
      const died = loop.died;
      if (died) {
        this.logger.error(
          `watchdog: the claim loop of "${keys.queue}" stopped unexpectedly (${errorMessage(died.error)}); restarting it`,
        );
        loop.restart();
      }
      const overdue = loop.overdue(now, (which) =>
        this.connections.readySince(which === 'blocking' ? blocking : this.redis),
      );
      if (overdue && overdue.overdueMs > this.options.watchdogTimeoutMs) {
        stalled = true;
        const connection = overdue.connection === 'blocking' ? blocking : this.redis;
        if (this.connections.retryingAfterLoss(connection, now, this.options.watchdogTimeoutMs)) {
          // Not a half-open socket: ioredis knows Redis is gone and is already trying again.
          this.stall.failed(
            new Error(`Redis is unreachable: claiming from "${keys.queue}" waits on a connection that is reconnecting`),
          );
        } else {
          this.stall.failed(
            new Error(
              describeStall(`claiming from "${keys.queue}"`, overdue.overdueMs, overdue.connection, connection.status),
            ),
          );
          this.reconnect(connection, now);
        }
      }
    }
    const beating = this.lease.beatingFor(now);
    if (beating !== undefined && beating > this.options.heartbeatIntervalMs + this.options.watchdogTimeoutMs) {
      stalled = true;
      if (this.connections.retryingAfterLoss(this.redis, now, this.options.watchdogTimeoutMs)) {
        this.stall.failed(new Error('Redis is unreachable: the heartbeat waits on a connection that is reconnecting'));
      } else {
        this.stall.failed(new Error(describeStall('the heartbeat', beating, 'command', this.redis.status)));
        this.reconnect(this.redis, now);
      }
    }
    if (stalled !== this.stalled) {
      this.stalled = stalled;
      if (!stalled) this.stall.succeeded();
      this.options.onStall?.(stalled);
    }
  }

  private reconnect(connection: RedisConnection, now: number): void {
    if (now - (this.reconnectedAt.get(connection) ?? 0) < this.options.watchdogTimeoutMs) {
      return; // give the last reconnection time to work
    }
    this.reconnectedAt.set(connection, now);
    this.connections.reconnect(connection);
  }
}

/** What the watchdog found, in words: an open connection that stopped answering, or a stuck handshake. */
function describeStall(what: string, overdueMs: number, connection: string, status: string): string {
  return status === 'ready'
    ? `${what} got no reply for ${overdueMs} ms past its due time on the ${connection} connection, which looks open (half-open, or a stalled server); reconnecting it`
    : `${what} has waited ${overdueMs} ms past its due time on the ${connection} connection, stuck while connecting (status ${status}); reconnecting it`;
}
