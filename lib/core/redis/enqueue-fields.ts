import { COALESCE_MODE_CODES } from '../model/codec.js';
import type { PreparedTask } from '../model/prepared-task.js';
import { firstSendRecord } from './call-record.js';

/** The enqueue script's arguments, encoded here alone (enqueueTasks-1.lua's header states them). */

/** How long the message telling a send() caller its task was replaced is kept for it (ms; a worker's default resultTtlMs). */
const REPLACED_REPLY_TTL_MS = 60_000;

/**
 * Starts an enqueue call's arguments with its call record, one field: mode '1' (a first send), the
 * record's TTL in seconds, and a new call id that carries the caller's deadline. ioredis may send the
 * call again after a reconnection; the record makes that idempotent (see enqueueTasks-1.lua and
 * `recordOf` in script-command.ts, which numbers it on its connection at its first write).
 */
export function startEnqueueCall(args: (string | number)[], deadline: number, timeoutMs: number): void {
  args.push(firstSendRecord(deadline, timeoutMs));
}

/**
 * One task's fields for enqueueTasks-1.lua: a plain task is 2 fields (client id, entry); a task with
 * options is 8, marked by a leading '' (client ids are never empty): '', client id, entry, priority, delay
 * (ms), deduplication key ('' none), its TTL (ms), task id; a tracked task is 11, marked by ' ' (client
 * ids have no spaces): the same 7, then its index's TTLs (ms) once ended and while live, and its reply channel;
 * a task with a coalescing key is 11, marked by '}' (client ids have no braces): client id, entry, priority,
 * delay (ms), the key, task id, mode (one letter), a debounce's longest wait (ms), reply channel, and how long
 * the message telling a replaced send() caller is kept (ms). A task whose payload is out of line takes the
 * format of a task with options (the script reads its body id from its entry there alone).
 */
export function pushEnqueueFields(args: (string | number)[], task: PreparedTask): void {
  const coalesce = task.coalesce;
  if (
    task.priority === 0 &&
    task.delayMs === 0 &&
    task.deduplicationKey === undefined &&
    !task.track &&
    !coalesce &&
    task.body === undefined
  ) {
    args.push(task.clientId, task.entry);
  } else if (coalesce) {
    args.push(
      '}',
      task.clientId,
      task.entry,
      task.priority,
      task.delayMs,
      coalesce.key,
      task.id,
      COALESCE_MODE_CODES[coalesce.mode],
      coalesce.maxWaitMs,
      task.replyTo ?? '',
      REPLACED_REPLY_TTL_MS,
    );
  } else {
    args.push(
      task.track ? ' ' : '',
      task.clientId,
      task.entry,
      task.priority,
      task.delayMs,
      task.deduplicationKey ?? '',
      task.deduplicationTtlMs,
      task.id,
    );
    if (task.track) args.push(task.track.keepMs, task.track.liveMs, task.replyTo ?? '');
  }
}
