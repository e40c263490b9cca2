import { describe, expect, it } from '@jest/globals';
import type { Overdue } from '../../../lib/core/worker/overdue.js';
import type { RedisConnection } from '../../../lib/core/redis/scripts.js';
import { QueueKeys } from '../../../lib/core/redis/keys.js';
import { Watchdog, type LoopHealth, type WatchedConnections } from '../../../lib/core/worker/watchdog.js';
import { CapturingLogger, workerOptions } from './fakes.js';

/** A connection as the watchdog sees it: a status and a name to tell them apart. */
function connection(name: string): RedisConnection {
  return { name, status: 'ready' } as unknown as RedisConnection;
}

/** The connections, scripted: which ones ioredis is already reconnecting, and the reconnections forced. */
class ScriptedConnections implements WatchedConnections {
  readonly command = connection('command');
  readonly reconnected: string[] = [];
  readonly retrying = new Set<RedisConnection>();

  readySince(): number | undefined {
    return undefined;
  }

  retryingAfterLoss(connection: RedisConnection): boolean {
    return this.retrying.has(connection);
  }

  reconnect(connection: RedisConnection): void {
    this.reconnected.push((connection as unknown as { name: string }).name);
  }
}

/** A claim loop's health, scripted: whether it died, and what it waits on past its allowance. */
class ScriptedLoop {
  died: { error: unknown } | undefined;
  overdueNow: Overdue | undefined;
  restarts = 0;

  restart(): void {
    this.restarts++;
    this.died = undefined;
  }

  overdue(): Overdue | undefined {
    return this.overdueNow;
  }
}

function watchdogWith(options: { beatingFor?: () => number | undefined } = {}) {
  const connections = new ScriptedConnections();
  const loop = new ScriptedLoop();
  const blocking = connection('blocking');
  const loops = new Map<QueueKeys, LoopHealth>([[new QueueKeys('unit', 'mail.send'), { loop, blocking }]]);
  const stalls: boolean[] = [];
  const logger = new CapturingLogger();
  const slowChecks: number[] = [];
  const watchdog = new Watchdog(
    connections,
    loops,
    { beatingFor: options.beatingFor ?? (() => undefined) },
    { warnSlow: (now) => slowChecks.push(now) },
    workerOptions({ watchdogTimeoutMs: 1_000, heartbeatIntervalMs: 500, onStall: (stalled) => stalls.push(stalled) }),
    logger,
    () => undefined,
  );
  return { watchdog, connections, loop, stalls, logger, slowChecks };
}

describe('Watchdog, one inspection at a time (no Redis, no timers)', () => {
  it('restarts a claim loop that ended while it should run, and says why', () => {
    const { watchdog, loop, logger } = watchdogWith();
    loop.died = { error: new Error('a bug') };
    watchdog.inspect(10_000);
    expect(loop.restarts).toBe(1);
    expect(logger.lines.join('\n')).toMatch(/claim loop of "mail.send" stopped unexpectedly \(a bug\); restarting it/);
    watchdog.inspect(10_100);
    expect(loop.restarts).toBe(1); // restarted once, not on every look
  });

  it('cuts a connection that stopped answering past watchdogTimeoutMs, once per timeout, and reports the stall and its end', () => {
    const { watchdog, loop, connections, stalls, logger } = watchdogWith();
    loop.overdueNow = { connection: 'blocking', overdueMs: 999 };
    watchdog.inspect(10_000);
    expect(connections.reconnected).toEqual([]); // within its allowance
    loop.overdueNow = { connection: 'blocking', overdueMs: 1_500 };
    watchdog.inspect(10_000);
    watchdog.inspect(10_500);
    expect(connections.reconnected).toEqual(['blocking']); // the last reconnection gets time to work
    watchdog.inspect(11_001);
    expect(connections.reconnected).toEqual(['blocking', 'blocking']);
    expect(stalls).toEqual([true]);
    loop.overdueNow = undefined;
    watchdog.inspect(12_000);
    expect(stalls).toEqual([true, false]);
    expect(logger.lines.join('\n')).toMatch(/no reply for 1500 ms past its due time on the blocking connection/);
  });

  it('leaves a connection ioredis is already reconnecting alone, reporting Redis unreachable', () => {
    const { watchdog, loop, connections, stalls, logger } = watchdogWith();
    loop.overdueNow = { connection: 'command', overdueMs: 5_000 };
    connections.retrying.add(connections.command);
    watchdog.inspect(10_000);
    expect(connections.reconnected).toEqual([]);
    expect(stalls).toEqual([true]);
    expect(logger.lines.join('\n')).toMatch(
      /Redis is unreachable: claiming from "mail.send" waits on a connection that is reconnecting/,
    );
  });

  it('cuts the command connection when the heartbeat has waited past its interval and the timeout', () => {
    let beating: number | undefined = 1_400;
    const { watchdog, connections, stalls, slowChecks } = watchdogWith({ beatingFor: () => beating });
    watchdog.inspect(10_000);
    expect(connections.reconnected).toEqual([]); // 1,400 ms: within 500 + 1,000
    beating = 1_600;
    watchdog.inspect(10_100);
    expect(connections.reconnected).toEqual(['command']);
    expect(stalls).toEqual([true]);
    beating = undefined;
    watchdog.inspect(10_200);
    expect(stalls).toEqual([true, false]);
    expect(slowChecks).toEqual([10_000, 10_100, 10_200]); // each look also warns about slow runs
  });
});
