import { errorMessage, type TaskLogger } from '../support/logger.js';
import type { ResolvedOutboxOptions } from './outbox-options.js';
import type { ClaimedRow, OutboxStore } from './outbox-store.js';

import type { RelayedTask } from '../producer/relay-enqueue.js';

export type { RelayedTask };

/** Where relayed tasks go (the client's producer). */
export interface RelayTarget {
  /** Enqueues a pattern's tasks, each at most once however often it is relayed (see `relayRecordMs`). */
  relay(pattern: string, tasks: readonly RelayedTask[], recordMs: number): Promise<void>;
  /** The rows' delete committed: their records may go soon. Best effort. */
  relayed(pattern: string, tasks: readonly RelayedTask[]): void;
}

/** What the relay did since it started. */
export interface RelayCounts {
  /** Rows moved to Redis (and deleted). */
  relayed: number;
  /** Rows found unreadable and marked. */
  rejected: number;
  /** Relay transactions that failed (rolled back: their rows wait for the next). */
  failures: number;
  /** When the last relay transaction committed (ms since the epoch; 0 never). */
  lastRelayAt: number;
}

/** How long the relay keeps looking often after a wake from this process (its emit's transaction may commit soon). */
const FAST_WINDOW_MS = 250;
const FAST_POLL_MS = 5;
/** Backoff after failures: 100 ms doubling, at most 5 s. */
const FAILURE_BACKOFF_MS = [100, 200, 400, 800, 1_600, 3_200, 5_000];

/** A row's enqueue fields, or why it cannot be relayed. */
function fieldsOf(row: ClaimedRow): readonly (string | number)[] | string {
  let fields: unknown;
  try {
    fields = JSON.parse(row.fields);
  } catch {
    return 'its fields are not JSON';
  }
  if (
    !Array.isArray(fields) ||
    fields.length < 2 ||
    !fields.every((f) => typeof f === 'string' || typeof f === 'number')
  ) {
    return 'its fields are not an array of strings and numbers';
  }
  return fields as (string | number)[];
}

/**
 * The outbox relay: claims committed rows (oldest first, `FOR UPDATE SKIP LOCKED`: relays never wait for
 * each other), enqueues their tasks (each under a call record named for its task id, so a row relayed
 * again after a crash writes nothing), deletes them and commits. A failure (Redis down, a replica short)
 * rolls the transaction back: the rows wait, and the relay tries again after a backoff. Woken by commits
 * (PostgreSQL NOTIFY), by this process's own emits, else every `pollMs`.
 */
export class OutboxRelay {
  readonly counts: RelayCounts = { relayed: 0, rejected: 0, failures: 0, lastRelayAt: 0 };
  private running = false;
  private loop: Promise<void> | undefined;
  private woken = false;
  private wakeUp: (() => void) | undefined;
  private fastUntil = 0;

  constructor(
    private readonly store: OutboxStore,
    private readonly target: RelayTarget,
    private readonly options: ResolvedOutboxOptions,
    private readonly logger?: TaskLogger,
  ) {}

  start(): void {
    if (this.running) return;
    this.running = true;
    this.loop = this.run();
  }

  /** Stops after the transaction under way (its rows are moved or left waiting, never half). */
  async stop(): Promise<void> {
    this.running = false;
    this.wakeUp?.();
    await this.loop;
    this.loop = undefined;
  }

  /** A commit may have added rows: look now. */
  wake(): void {
    this.woken = true;
    this.wakeUp?.();
  }

  /** This process wrote rows in a transaction not committed yet: look now and often for a moment. */
  nudge(): void {
    this.fastUntil = Date.now() + FAST_WINDOW_MS;
    this.wake();
  }

  /**
   * One relay transaction: up to `batchSize` rows moved. Resolves with how many rows it claimed.
   * Exposed for tests and `RedisTaskOutbox.relayNow()`.
   */
  async relayOnce(): Promise<number> {
    let moved: Map<string, RelayedTask[]> | undefined;
    const claimed = await this.store.transaction(async (tx) => {
      try {
        const rows = await this.store.claim(tx, this.options.batchSize);
        if (rows.length === 0) return 0;
        moved = await this.move(tx, rows);
        return rows.length;
      } finally {
        await this.store.endTurn(tx);
      }
    });
    if (moved) {
      for (const [pattern, tasks] of moved as Map<string, RelayedTask[]>) {
        this.counts.relayed += tasks.length;
        this.target.relayed(pattern, tasks);
      }
      this.counts.lastRelayAt = Date.now();
    }
    return claimed;
  }

  /** Marks unreadable rows, enqueues the others' tasks (by pattern) and deletes their rows, in `tx`. */
  private async move(tx: unknown, rows: readonly ClaimedRow[]): Promise<Map<string, RelayedTask[]>> {
    const byPattern = new Map<string, RelayedTask[]>();
    const done: string[] = [];
    let rejected = 0;
    for (const row of rows) {
      const fields = fieldsOf(row);
      if (typeof fields === 'string') {
        await this.store.reject(tx, row.id, `nestjs-redis-tasks: outbox row ${row.id} cannot be relayed: ${fields}`);
        this.logger?.error(
          `outbox row ${row.id} (task ${row.taskId}) cannot be relayed: ${fields}; marked, left for an operator`,
        );
        rejected++;
        continue;
      }
      const tasks = byPattern.get(row.pattern) ?? [];
      tasks.push({ taskId: row.taskId, shardKey: row.shardKey, fields });
      byPattern.set(row.pattern, tasks);
      done.push(row.id);
    }
    await Promise.all(
      [...byPattern].map(([pattern, tasks]) => this.target.relay(pattern, tasks, this.options.relayRecordMs)),
    );
    await this.store.remove(tx, done);
    this.counts.rejected += rejected;
    return byPattern;
  }

  private async run(): Promise<void> {
    let failures = 0;
    while (this.running) {
      this.woken = false;
      let claimed = 0;
      try {
        claimed = await this.relayOnce();
        if (failures > 0) this.logger?.log(`outbox relay: moving rows again after ${failures} failed attempts`);
        failures = 0;
      } catch (error) {
        this.counts.failures++;
        if (failures === 0)
          this.logger?.warn(`outbox relay failed, rows left waiting, trying again: ${errorMessage(error)}`);
        failures++;
      }
      if (!this.running) break;
      if (failures === 0 && (claimed === this.options.batchSize || (this.woken && claimed > 0))) continue;
      const waitMs =
        failures > 0
          ? FAILURE_BACKOFF_MS[Math.min(failures, FAILURE_BACKOFF_MS.length) - 1]
          : this.woken
            ? 0
            : Date.now() < this.fastUntil
              ? FAST_POLL_MS
              : this.options.pollMs;
      await this.sleep(waitMs, failures === 0);
    }
  }

  /** Waits `ms`, cut short by a wake when `wakeable`. */
  private sleep(ms: number, wakeable: boolean): Promise<void> {
    if (ms === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.wakeUp = undefined;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.wakeUp = wakeable ? done : () => (this.running ? undefined : done());
      if (!this.running) done();
    });
  }
}
