import type { TrackTimes } from './prepared-task.js';

export type { TrackTimes };

/**
 * Tracking a task: an index per task (`QueueKeys.task`) that every step keeps up to date, so its status can
 * be read by id, it can be cancelled wherever it is, and its progress is kept. Off unless asked for (the
 * client's `track` option, or a record's `setTracked()`): without it nothing is kept per task.
 */
export interface TrackOptions {
  /** How long the index is kept once the task ended (completed, cancelled, dead), in ms. Default 1 h. */
  readonly keepMs?: number;
  /**
   * Longest time the index is kept while the task waits or runs, from its last change (ms); a task
   * waiting longer goes on untracked. Default 7 days.
   */
  readonly liveMs?: number;
}

export const TRACK_DEFAULTS: TrackTimes = { keepMs: 3_600_000, liveMs: 7 * 86_400_000 };
/** Longest `keepMs` and `liveMs`: a year (as the longest delay). */
export const MAX_TRACK_MS = 366 * 86_400_000;

/** Where a tracked task is, or how it ended; `unknown` when it has no index (not tracked, or expired). */
export type TaskState = 'pending' | 'delayed' | 'running' | 'completed' | 'cancelled' | 'dead' | 'unknown';

/** What `getTask` tells of a task. Fields are present where they apply to its state. */
export interface TaskStatus {
  readonly state: TaskState;
  readonly id: string;
  readonly pattern: string;
  /** The consumer group whose copy this is. */
  readonly group?: string;
  readonly clientId?: string;
  /** When it was enqueued, and when its state last changed (Redis clock, ms). */
  readonly enqueuedAt?: number;
  readonly changedAt?: number;
  readonly priority?: number;
  /** delayed: when it becomes claimable (ms), and why it waits (`delay` asked at enqueue, or a `retry`). */
  readonly dueAt?: number;
  readonly why?: 'delay' | 'retry';
  /** pending: tasks waiting before it in its client's list is not counted (that would scan); how many its client has waiting. */
  readonly clientPending?: number;
  /** running (or, once ended, its last run): which worker, which run (1-based), since when; running: until when its worker's lease holds. */
  readonly workerId?: string;
  readonly attempt?: number;
  readonly startedAt?: number;
  readonly leaseExpiresAt?: number;
  /** The last progress value its handler reported (`ctx.progress()`), kept after it ended. */
  readonly progress?: unknown;
  /**
   * Durable steps (`ctx.step`) while the task waits or runs: how many have finished, and the last checkpoint
   * (`ctx.checkpoint`). They go when the task ends.
   */
  readonly steps?: { readonly done: number; readonly checkpoint?: unknown };
  /** completed: a `send()` task's result. */
  readonly result?: unknown;
  /** dead: why, in words, and the handler's error. */
  readonly reason?: string;
  readonly detail?: string;
  readonly error?: unknown;
  /** cancelled: what it was doing when cancelled, and the reason given. */
  readonly was?: 'pending' | 'delayed' | 'running';
  /** A cancel was asked while the task was between places: it is cancelled before it runs again. */
  readonly cancelRequested?: boolean;
}

/** What a cancel did. */
export type CancelResult =
  | { readonly cancelled: true; readonly was: 'pending' | 'delayed' | 'running' }
  | { readonly cancelled: false; readonly state: TaskState };

const STATES = new Set<string>(['pending', 'delayed', 'running', 'completed', 'cancelled', 'dead']);

/**
 * When the index last changed: its `at`, written by every move but two (its creation, whose time is `enq`, and
 * its run's start, whose time is `started`), so the latest of the three.
 */
function lastChange(...times: (number | undefined)[]): number | undefined {
  const known = times.filter((time): time is number => time !== undefined);
  return known.length === 0 ? undefined : Math.max(...known);
}

/** A task's status from its index (HGETALL), checked field by field: anything unreadable is left out. */
export function parseTaskIndex(
  fields: Readonly<Record<string, string>>,
  about: { readonly id: string; readonly pattern: string; readonly group?: string },
): TaskStatus {
  const state = STATES.has(fields.state) ? (fields.state as TaskState) : 'unknown';
  const number = (name: string): number | undefined => {
    const value = fields[name] === undefined || fields[name] === '' ? NaN : Number(fields[name]);
    return Number.isFinite(value) ? value : undefined;
  };
  const json = (name: string): unknown => {
    if (fields[name] === undefined || fields[name] === '') return undefined;
    try {
      return JSON.parse(fields[name]) as unknown;
    } catch {
      return undefined;
    }
  };
  const status: Record<string, unknown> = {
    state,
    id: about.id,
    pattern: about.pattern,
    group: about.group,
    clientId: fields.client,
    enqueuedAt: number('enq'),
    changedAt: lastChange(number('at'), number('enq'), number('started')),
    priority: number('priority') || undefined,
    progress: json('progress'),
  };
  if (state === 'delayed') {
    status.dueAt = number('due');
    status.why = fields.why === 'retry' ? 'retry' : 'delay';
  }
  // Running: where; ended: who ran it last.
  status.workerId = fields.worker;
  status.attempt = number('attempt');
  status.startedAt = number('started');
  if (state === 'completed') status.result = (json('result') as { response?: unknown } | undefined)?.response;
  if (state === 'dead') {
    status.reason = fields.reason || undefined;
    status.detail = fields.detail || undefined;
    status.error = json('error');
  }
  if (state === 'cancelled') {
    status.was = fields.was;
    status.reason = fields.reason || undefined;
  }
  if (fields.cancel !== undefined && (state === 'pending' || state === 'delayed' || state === 'running')) {
    status.cancelRequested = true;
    status.reason = fields.cancel || undefined;
  }
  for (const key of Object.keys(status)) if (status[key] === undefined) delete status[key];
  return status as unknown as TaskStatus;
}
