import { errorMessage, type TaskLogger } from '../support/logger.js';
import type { RelayedTask, RelayTarget } from './outbox-relay.js';
import type { OutboxRow } from './outbox-store.js';

/** What the after-commit mode did since the process started. */
export interface AfterCommitCounts {
  /** Tasks sent to Redis after their transaction committed. */
  sent: number;
  /** Tasks of committed transactions that Redis did not take (refused, down past enqueueTimeoutMs): lost. */
  lost: number;
}

/**
 * The after-commit mode's send: the tasks a transaction emitted, to Redis once it committed (each under its
 * record, as the relay sends rows: a resend after a reconnection writes nothing twice). A failure loses them,
 * logged with their count, patterns and ids (never a payload): the mode's documented window.
 */
export async function sendAfterCommit(
  rows: readonly OutboxRow[],
  target: RelayTarget,
  recordMs: number,
  counts: AfterCommitCounts,
  logger?: TaskLogger,
): Promise<void> {
  const byPattern = new Map<string, RelayedTask[]>();
  for (const row of rows) {
    const tasks = byPattern.get(row.pattern) ?? [];
    tasks.push({ taskId: row.taskId, shardKey: row.shardKey, fields: JSON.parse(row.fields) as (string | number)[] });
    byPattern.set(row.pattern, tasks);
  }
  await Promise.all(
    [...byPattern].map(async ([pattern, tasks]) => {
      try {
        await target.relay(pattern, tasks, recordMs);
        target.relayed(pattern, tasks);
        counts.sent += tasks.length;
      } catch (error) {
        counts.lost += tasks.length;
        logger?.error(
          `${tasks.length} task(s) of "${pattern}" emitted in a committed transaction were lost (after-commit mode): ` +
            `${errorMessage(error)}; ids: ${tasks.map((task) => task.taskId).join(', ')}`,
        );
      }
    }),
  );
}
