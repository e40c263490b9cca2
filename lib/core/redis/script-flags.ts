/**
 * What each script may do when Redis is full (`maxmemory` reached, policy `noeviction`), as Redis 7's
 * script flags say it (a `#!lua flags=…` first line; Redis 6.2 knows no flags and runs the scripts as
 * written):
 * - `drains`: it runs (`allow-oom`): what a worker needs to start, claim, settle and recover tasks, what a
 *   reaper needs to promote and recover them, and an operator's cancels. None of them adds tasks (but a flow
 *   node's success releasing its children in its settle, on one server: the flow was admitted at creation, and
 *   each child's entry moves out of its flow's record): a full Redis is drained by starting workers.
 * - `grows`: refused whole, before its first command (the flagged script without `allow-oom`), so a
 *   producer's enqueue fails with `RedisFullError` and nothing half-written: what adds tasks, batches,
 *   schedules or dead letters back.
 * - `reads`: read only (`no-writes`): it runs whatever the memory.
 * Every flagged script also keeps the unflagged one's freedom to touch keys of several slots on one node
 * (`allow-cross-slot-keys`; each script keeps to one hash tag anyway).
 */
export type WhenFull = 'drains' | 'grows' | 'reads';

export const WHEN_FULL: Readonly<Record<string, WhenFull>> = {
  ackTasks: 'drains',
  addBatchChildren: 'grows',
  advanceSchedule: 'drains',
  cancelBatch: 'drains',
  cancelFlow: 'drains',
  cancelTask: 'drains',
  countFlow: 'drains',
  changeSchedule: 'grows',
  claimSchedules: 'grows',
  claimTasks: 'drains',
  closeBatch: 'drains',
  countUnreachable: 'reads',
  deadLetterDelayed: 'drains',
  deadLetterTask: 'drains',
  dropHeld: 'drains',
  enqueueTasks: 'grows',
  foldBatch: 'drains',
  foldFlow: 'drains',
  forgetWorker: 'drains',
  heartbeatWorker: 'drains',
  markFlow: 'drains',
  openBatch: 'grows',
  openFlow: 'grows',
  promoteTasks: 'drains',
  readOverview: 'reads',
  recordShardCount: 'drains',
  rejoinClient: 'drains',
  releaseLock: 'drains',
  releaseThrottled: 'drains',
  reportProgress: 'drains',
  saveStep: 'drains',
  requeueDeadLetters: 'grows',
  requeueTasks: 'drains',
  retryTask: 'drains',
  revokeTask: 'drains',
  sealBatch: 'drains',
  snapshotCounters: 'drains',
  startCoalesced: 'drains',
  takeSweepTurn: 'drains',
  startTasks: 'drains',
  trimBatchEvents: 'drains',
};

/** The first line Redis 7 reads a script's flags from. */
export function shebangOf(whenFull: WhenFull): string {
  const flags =
    whenFull === 'drains'
      ? 'allow-oom,allow-cross-slot-keys'
      : whenFull === 'reads'
        ? 'no-writes,allow-cross-slot-keys'
        : 'allow-cross-slot-keys';
  return `#!lua flags=${flags}\n`;
}

let flagsOn = false;

/**
 * Scripts are sent with their flags from now on in this process: a server it checked is Redis 7 or newer
 * (a Redis 6.2 server would not compile a flagged script; it runs the scripts as written).
 */
export function useScriptFlags(on: boolean): void {
  flagsOn = on;
}

export function scriptFlagsOn(): boolean {
  return flagsOn;
}
