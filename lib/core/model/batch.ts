/** A task enqueued when a batch completes: its pattern, and optionally a payload and client id of its own. */
export interface BatchCallback {
  readonly pattern: string;
  /** Given to the callback's handler as `payload` (its summary comes beside it). */
  readonly payload?: unknown;
  /** The callback task's client id (default: the client's). */
  readonly clientId?: string;
}

/** What a batch is opened with (`RedisTaskClient.batch()`, or `emitBatch(..., { batch })`). */
export interface BatchOptions {
  /** The batch id (default: generated): at most 200 characters, no braces, spaces or control characters. */
  readonly id?: string;
  /** Enqueued once every child settled (succeeded, dead-lettered or cancelled), exactly once. */
  readonly onComplete: BatchCallback;
  /** Enqueued as well (exactly once) when every child succeeded. */
  readonly onSuccess?: BatchCallback;
  /**
   * How long the batch's keys are kept once its callbacks settled (ms; default 1 day; a week at least while
   * they have not). Its id can be used again once they expired.
   */
  readonly keepMs?: number;
}

/** The payload a batch callback's handler gets. */
export interface BatchSummary {
  readonly batchId: string;
  readonly total: number;
  readonly succeeded: number;
  /** Children that ended in dead letters. */
  readonly failed: number;
  readonly cancelled: number;
  /** The ids of the children that ended in dead letters. */
  readonly failedIds: string[];
  /** The callback's own payload (`onComplete.payload`), if it has one. */
  readonly payload?: unknown;
}

/** Where a batch is (`RedisTaskAdmin.getBatch`). */
export interface BatchStatus {
  readonly id: string;
  /** open (children may be added), sealed, cancelled; unknown: no record (never opened, or expired). */
  readonly state: 'open' | 'sealed' | 'cancelled' | 'unknown';
  readonly total: number;
  /** Children not settled yet (waiting, delayed or running). */
  readonly pending: number;
  readonly succeeded: number;
  readonly failed: number;
  readonly cancelled: number;
  /** waiting (not every child settled, or not sealed), fired (completed; callbacks being enqueued), enqueued. */
  readonly callback: 'waiting' | 'fired' | 'enqueued';
  /** The callback task ids, once enqueued. */
  readonly callbackIds?: string[];
  /** When it was opened and when it completed (ms since the epoch, Redis clock). */
  readonly createdAt?: number;
  readonly firedAt?: number;
}

/** A batch that completed: what its callbacks are enqueued with (see batchRecord.lua's batchFire). */
export interface BatchFire {
  readonly complete: BatchCallback;
  readonly success?: BatchCallback;
  readonly total: number;
  readonly succeeded: number;
  readonly dead: number;
  readonly cancelled: number;
  readonly failedIds: string[];
  /** The batch's generation (its record's creation, Redis ms): names its callbacks' deduplication guards. */
  readonly created: string;
}

/** What `cancelBatch` did: cancelled (its waiting tasks removed, its running ones stopped), or no such batch. */
export type BatchCancelResult =
  | {
      readonly cancelled: true;
      /** Its state before. */
      readonly was: 'open' | 'sealed' | 'cancelled';
      /** Waiting tasks taken out of their queues. */
      readonly removed: number;
      /** Running tasks stopped through their fences. */
      readonly stopped: number;
    }
  | { readonly cancelled: false; readonly state: 'unknown' };

export const BATCH_DEFAULT_KEEP_MS = 86_400_000;

/** A batch's callbacks: `complete` always, `success` when every child succeeded. */
export type BatchCallbackKind = 'complete' | 'success';

/** The task id of a batch's callback: fixed, so enqueueing it again is seen as the same task. */
export function callbackTaskId(batchId: string, which: BatchCallbackKind): string {
  return `batch.${batchId}.${which}`;
}

/** Which callback of batch `batchId` the task `taskId` is, if it is one. */
export function callbackKindOf(batchId: string, taskId: string): BatchCallbackKind | undefined {
  if (taskId === callbackTaskId(batchId, 'complete')) return 'complete';
  if (taskId === callbackTaskId(batchId, 'success')) return 'success';
  return undefined;
}

/**
 * The deduplication key that keeps a callback of one generation of a batch (`created`) enqueued once, however
 * often the batch fires (reapers at once, after a crash). It goes once the callback settled (nothing can
 * enqueue it again then); a batch id used again later is another generation, with guards of its own.
 */
export function callbackGuard(batchId: string, created: string, which: BatchCallbackKind): string {
  return `batch:${batchId}:${created}:${which}`;
}
