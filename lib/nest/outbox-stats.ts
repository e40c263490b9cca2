import type { OutboxStats } from '../core/outbox/outbox-store.js';
import type { RelayCounts } from '../core/outbox/outbox-relay.js';
import type { AfterCommitCounts } from '../core/outbox/after-commit.js';

/**
 * The outbox's state as the operating tools read it (metrics, health, dashboard), under a token of its own:
 * those tools never load `nestjs-redis-tasks/outbox` (nor its optional peers); `RedisTaskOutboxModule`
 * provides it.
 */
export const REDIS_TASK_OUTBOX_STATS = Symbol.for('nestjs-redis-tasks.outboxStats');

/** The table's state (rows waiting, the oldest one's age, rows left unreadable) and this process's relay counts. */
export interface RedisTaskOutboxStats extends OutboxStats {
  /** This process's relay since it started; undefined when it runs none (`relay: false`). */
  readonly relay: Readonly<RelayCounts> | undefined;
  /** After-commit mode (no table): tasks sent after their commit, and tasks lost. */
  readonly afterCommit?: Readonly<AfterCommitCounts>;
}

export interface OutboxStatsSource {
  stats(): Promise<RedisTaskOutboxStats>;
}

/** The outbox's stats within `timeoutMs`; undefined past it or on a failure (the database is down, say). */
export async function outboxStatsWithin(
  source: OutboxStatsSource,
  timeoutMs: number,
): Promise<RedisTaskOutboxStats | { readonly error: string }> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<{ error: string }>((resolve) => {
    timer = setTimeout(() => resolve({ error: `the database did not answer within ${timeoutMs} ms` }), timeoutMs);
  });
  try {
    return await Promise.race([
      source
        .stats()
        .catch((error: unknown) => ({ error: `the outbox table cannot be read: ${(error as Error).message}` })),
      late,
    ]);
  } finally {
    clearTimeout(timer);
  }
}
