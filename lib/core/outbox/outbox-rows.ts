import { patternProblem } from '../config/rules.js';
import { InvalidTaskError } from '../model/errors.js';
import { shardKeyOf } from '../producer/hand-over.js';
import type { EnqueueReceipt } from '../producer/producer-types.js';
import { prepareTask, type EnqueueItem, type ItemLimits } from '../producer/task-items.js';
import { pushEnqueueFields } from '../redis/enqueue-fields.js';
import { describe } from '../support/describe.js';
import type { OutboxRow } from './outbox-store.js';

/**
 * What an emit inside a transaction answers: the task's id, and where it went: the outbox table (`outbox`),
 * or the tasks this transaction sends after its commit (`afterCommit`, the lossy mode).
 */
export interface OutboxReceipt extends EnqueueReceipt {
  readonly outbox?: true;
  readonly afterCommit?: true;
}

/**
 * The outbox rows of one call's tasks, checked as an enqueue checks them (one invalid item fails the call,
 * nothing written) and encoded as the enqueue script takes them: the relay sends them as they are.
 */
export function outboxRows(
  pattern: string,
  items: readonly EnqueueItem[],
  limits: ItemLimits,
): { rows: OutboxRow[]; receipts: EnqueueReceipt[] } {
  const problem = patternProblem(pattern);
  if (problem) throw new InvalidTaskError(`the pattern ${problem}, got ${describe(pattern)}`);
  const now = Date.now();
  const batch = items.length > 1;
  const rows: OutboxRow[] = [];
  const receipts: EnqueueReceipt[] = [];
  items.forEach((item, index) => {
    if (item.replyTo !== undefined || item.batch !== undefined) {
      throw new InvalidTaskError('a send() or a batch task cannot go through the outbox', batch ? index : undefined);
    }
    const task = prepareTask(item, now, batch ? index : undefined, limits);
    const fields: (string | number)[] = [];
    pushEnqueueFields(fields, task);
    rows.push({ taskId: task.id, pattern, shardKey: shardKeyOf(task), fields: JSON.stringify(fields) });
    receipts.push({ id: task.id, duplicate: false });
  });
  return { rows, receipts };
}
