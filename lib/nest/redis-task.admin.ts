import { scrubbing } from '../core/support/redact.js';
import { Injectable } from '@nestjs/common';
import {
  TaskAdmin,
  type DeadLetterSelection,
  type QueueStats,
  type RemovedGroup,
  type RequeueDeadLettersResult,
  type ScheduleInfo,
  type TriggerResult,
  type UpsertResult,
  type WorkerInfo,
} from '../core/admin/admin.js';
import type { ScheduleSpec } from '../core/model/schedule.js';
import type { BatchCancelResult, BatchStatus } from '../core/model/batch.js';
import type { FlowCancelResult, FlowStatus } from '../core/model/flow.js';
import type { CancelResult, TaskStatus } from '../core/model/task-status.js';
import type { DeadLetterRecord } from '../core/model/dead-letter.js';
import type { DeletedPrefix } from '../core/admin/prefix-cleanup.js';
import { DEFAULT_GROUP } from '../core/config/options.js';
import { validateGroup } from '../core/config/rules.js';
import { answeredWithin, refusedAs } from '../core/admin/readiness.js';
import { readMemory, type RedisMemory } from '../core/admin/memory.js';
import { readyBy } from './ready-by.js';
import { RedisTaskClient } from './redis-task.client.js';

/**
 * Operations on queues: stats, workers, pause / resume, dead letters (list, requeue with attempts reset,
 * purge). Injectable from
 * `RedisTaskModule`; without Nest, `new RedisTaskAdmin(new RedisTaskClient(options))`.
 */
@Injectable()
export class RedisTaskAdmin {
  /** The consumer group this admin acts on (see `forGroup`). */
  private group = DEFAULT_GROUP;

  constructor(private readonly client: RedisTaskClient) {}

  /** The same operations on a consumer group's copies (stats, dead letters, pause, …). */
  forGroup(group: string): RedisTaskAdmin {
    validateGroup('group', group);
    const scoped = new RedisTaskAdmin(this.client);
    scoped.group = group;
    return scoped;
  }

  /** Consumer groups registered on a pattern. */
  readonly groups: (pattern: string) => Promise<string[]> = this.forward('groups');

  /** Unregisters a group from a pattern and deletes its copies; reports how many of each were deleted. */
  readonly removeGroup: (pattern: string, group: string) => Promise<RemovedGroup> = this.forward('removeGroup');

  /**
   * Where a tracked task is, or how it ended: `{ state, ... }` with `pending`, `delayed` (due time, why),
   * `running` (worker, attempt, start, lease expiry, last progress), `completed` (a `send()` result),
   * `cancelled`, `dead` (reason), or `unknown` (not tracked, or its index expired). One read per shard.
   */
  readonly getTask: (pattern: string, id: string) => Promise<TaskStatus> = this.forward('getTask');

  /**
   * A batch by id: its state (open, sealed, cancelled, unknown), its tasks' counts (total, pending,
   * succeeded, failed: ended in dead letters, cancelled) and its callback's (waiting, fired, enqueued, with
   * the callback task ids). Counts follow the tasks' settles within a reaper's sweep.
   */
  readonly getBatch: (id: string) => Promise<BatchStatus> = this.forward('getBatch');

  /** How many batches were opened and completed under the prefix (counted in Redis, by every process). */
  readonly batchCounts: () => Promise<{ opened: number; completed: number }> = this.forward('batchCounts');

  /**
   * A flow by id (`RedisTaskClient.flow()`): its state (running, succeeded, failed, cancelled, unknown), why
   * it failed, whether it ended, and every node's state (waiting, released, succeeded, failed, cancelled,
   * skipped) with its result or error. A node's settle shows within milliseconds (its worker folds it), or
   * a reaper's sweep.
   */
  readonly getFlow: (id: string) => Promise<FlowStatus> = this.forward('getFlow');

  /**
   * Cancels a running flow: nothing of it is released any more, its waiting nodes are cancelled, its released
   * ones stopped through their fences (a waiting task removed, a running one's `ctx.signal` aborted with
   * `TaskCancelledError` within a heartbeat, its late outcome refused). Its completion callback is enqueued once,
   * with state `cancelled`, once every node settled. A flow that ended answers `{ cancelled: false, state }`.
   */
  readonly cancelFlow: (id: string, reason?: string) => Promise<FlowCancelResult> = this.forward('cancelFlow');

  /** How many flows were created, and ended in each state, under the prefix (counted in Redis). */
  readonly flowCounts: () => Promise<{ created: number; succeeded: number; failed: number; cancelled: number }> =
    this.forward('flowCounts');

  /**
   * Cancels a batch: no task can be added any more; its waiting tasks are removed from their queues, its
   * running ones stopped through their fences (`ctx.signal` aborts with `TaskCancelledError` within a
   * heartbeat); each counts as cancelled, and its callback is enqueued once, with the cancelled count, once
   * every task settled. Answers how many were removed and stopped, or `{ cancelled: false, state: 'unknown' }`.
   */
  readonly cancelBatch: (id: string) => Promise<BatchCancelResult> = this.forward('cancelBatch');

  /**
   * Cancels a tracked task wherever it is, in every consumer group: a waiting one is removed; a running
   * one has its fencing token revoked (its handler's `ctx.signal` aborts with `TaskCancelledError` within
   * a heartbeat, its late outcome is refused, no recovery returns it). A `send()` caller gets
   * `TaskCancelledError`. Answers `{ cancelled: true, was }`, or `{ cancelled: false, state }` for a task
   * that already ended (or `unknown`).
   */
  readonly cancel: (pattern: string, id: string, reason?: string) => Promise<CancelResult> = this.forward('cancelTask');

  /** The patterns in use under the prefix. */
  readonly queues: () => Promise<string[]> = this.forward('queues');

  /** Pending per client, in flight per worker, delayed, dead letters, oldest pending age, outcome counters. */
  readonly stats: (pattern: string) => Promise<QueueStats> = this.forward('stats');

  /** Forgets a pattern's recorded faults (broken keys found by the scripts), once dealt with. */
  readonly clearFaults: (pattern: string) => Promise<number> = this.forward('clearFaults');

  /** Workers of one pattern, or of every pattern, with their leases and tasks in flight. */
  readonly workers: (pattern?: string) => Promise<WorkerInfo[]> = this.forward('workers');

  /** Workers stop claiming from the pattern; running handlers finish; producers still enqueue. */
  readonly pause: (pattern: string) => Promise<void> = this.forward('pause');

  /** Workers claim from the pattern again. */
  readonly resume: (pattern: string) => Promise<void> = this.forward('resume');

  /** A client's share of claims relative to others (weight 1 to 1,000; 1 is the default). */
  readonly setClientWeight: (pattern: string, clientId: string, weight: number) => Promise<void> =
    this.forward('setClientWeight');

  /** Tasks of one client started per second at most (overrides the pattern's limit); null removes it. */
  readonly setClientRateLimit: (pattern: string, clientId: string, rate: number | null) => Promise<void> =
    this.forward('setClientRateLimit');

  /** The clients' weights set on a pattern. */
  readonly clientWeights: (pattern: string) => Promise<Record<string, number>> = this.forward('clientWeights');

  /** A page of a pattern's dead letters, newest first. */
  readonly listDeadLetters: (
    pattern: string,
    page?: { offset?: number; limit?: number },
  ) => Promise<DeadLetterRecord[]> = this.forward('listDeadLetters');

  /** How many dead letters a pattern holds. */
  readonly countDeadLetters: (pattern: string) => Promise<number> = this.forward('countDeadLetters');

  /** Runs dead letters again, attempts reset: `'all'`, or `{ ids: [...] }` for one or some tasks. */
  readonly requeueDeadLetters: (pattern: string, selection: DeadLetterSelection) => Promise<RequeueDeadLettersResult> =
    this.forward('requeueDeadLetters');

  /** Deletes dead letters: `'all'`, or `{ ids: [...] }`. */
  readonly purgeDeadLetters: (pattern: string, selection: DeadLetterSelection) => Promise<number> =
    this.forward('purgeDeadLetters');

  /**
   * Stores a recurring schedule: each tick one task of `spec.pattern`, fired by whichever worker or reaper
   * process checks first, never twice. Replicas storing the same spec at once leave one schedule
   * (`'unchanged'` for all but the first); a changed spec takes effect from its next tick (`'updated'`).
   * An invalid spec fails with `InvalidScheduleError` naming the field, and nothing is written.
   */
  readonly upsertSchedule: (id: string, spec: ScheduleSpec) => Promise<UpsertResult> = this.forward('upsertSchedule');

  /** Removes a schedule: no more ticks (a task it already produced still runs). False when there was none. */
  readonly removeSchedule: (id: string) => Promise<boolean> = this.forward('removeSchedule');

  /** Every schedule: its spec, paused or orphaned, the next 3 ticks, the last tick and the task it produced. */
  readonly listSchedules: () => Promise<ScheduleInfo[]> = this.forward('listSchedules');

  /** No ticks until `resumeSchedule` (`ScheduleNotFoundError` when there is no such schedule). */
  readonly pauseSchedule: (id: string) => Promise<void> = this.forward('pauseSchedule');

  /** Ticks again from the next one after now (the ticks of the pause are not made up). */
  readonly resumeSchedule: (id: string) => Promise<void> = this.forward('resumeSchedule');

  /** One task now, outside the rhythm; with `overlap: 'skip'`, none while the previous task still lives. */
  readonly triggerSchedule: (id: string) => Promise<TriggerResult> = this.forward('triggerSchedule');

  /** Recurring schedules as a noun: `admin.schedules.upsert(id, spec)` is `admin.upsertSchedule(id, spec)`. */
  readonly schedules = {
    upsert: this.upsertSchedule,
    remove: this.removeSchedule,
    list: this.listSchedules,
    pause: this.pauseSchedule,
    resume: this.resumeSchedule,
    trigger: this.triggerSchedule,
  };

  /** Dead letters as a noun: `admin.deadLetters.requeue(pattern, 'all')` is `admin.requeueDeadLetters(...)`. */
  readonly deadLetters = {
    list: this.listDeadLetters,
    count: this.countDeadLetters,
    requeue: this.requeueDeadLetters,
    purge: this.purgeDeadLetters,
  };

  /** Tracked tasks as a noun: `admin.tasks.get(pattern, id)`, `admin.tasks.cancel(pattern, id, reason?)`. */
  readonly tasks = { get: this.getTask, cancel: this.cancel };

  /** Batches as a noun: `admin.batches.get(id)`, `.cancel(id)`, `.counts()`. */
  readonly batches = { get: this.getBatch, cancel: this.cancelBatch, counts: this.batchCounts };

  /** A pattern's clients as a noun: `admin.clients.setWeight(pattern, clientId, 3)`, `.setRateLimit`, `.weights`. */
  readonly clients = {
    setWeight: this.setClientWeight,
    setRateLimit: this.setClientRateLimit,
    weights: this.clientWeights,
  };

  /**
   * How full Redis is (`INFO memory`; on a Cluster, its fullest primary): `full` while it refuses enqueues
   * (`maxmemory` reached with `noeviction`), which workers keep draining.
   */
  async memory(): Promise<RedisMemory> {
    const { connection, enqueueTimeoutMs } = this.client.options;
    return answeredWithin(connection, enqueueTimeoutMs, 'the admin API', (deadline) =>
      readyBy(this.client, deadline, 'the admin API').then(readMemory),
    );
  }

  /**
   * Deletes every key of this client's prefix: all its patterns, consumer groups, dead letters and
   * settings, on every Cluster node. Refused with `PrefixInUseError` (nothing deleted) while a worker of the
   * prefix is alive, this app's own included: close the app's microservices first, or use
   * `deleteRedisTaskPrefix` from `nestjs-redis-tasks/testing` after `app.close()`. It walks the keys (SCAN),
   * so it is for teardown and decommissioning; it is not bounded by `enqueueTimeoutMs` once connected.
   */
  async deletePrefix(): Promise<DeletedPrefix> {
    const redis = await readyBy(this.client, Date.now() + this.client.options.enqueueTimeoutMs, 'the admin API');
    return scrubbing(TaskAdmin.forPrefix(redis, this.client.options.prefix)).deletePrefix();
  }

  /**
   * The admin call `method` of the core's TaskAdmin, each call within one deadline (see `call`): every
   * operation above is one of these, so the deadline is applied here once. It reads `this.client` when
   * called, not when made (the fields above are made before the constructor's body runs).
   */
  private forward<K extends AdminCall>(method: K): TaskAdmin[K] {
    const call = (...args: unknown[]) =>
      this.call((admin) => (admin[method] as (...given: unknown[]) => Promise<unknown>).apply(admin, args));
    return call as TaskAdmin[K];
  }

  /**
   * One admin call within one deadline (`enqueueTimeoutMs`), connecting included: while Redis is
   * unreachable it fails in time with `RedisUnavailableError` instead of waiting on ioredis's retries
   * (a dashboard, a health check or a metrics scrape must answer while Redis is down).
   */

  private call<T>(work: (admin: TaskAdmin) => Promise<T>): Promise<T> {
    const { connection, enqueueTimeoutMs, prefix } = this.client.options;
    return answeredWithin(connection, enqueueTimeoutMs, 'the admin API', (deadline) =>
      readyBy(this.client, deadline, 'the admin API').then((redis) =>
        // Errors reach users' loggers without the Redis command arguments ioredis attaches to them; an ACL
        // refusal or a full Redis as its typed error.
        work(scrubbing(TaskAdmin.forPrefix(redis, prefix, this.group))).catch((error: unknown) => {
          throw refusedAs(error, prefix, connection);
        }),
      ),
    );
  }
}

/** The core admin's operations this admin forwards (each a call returning a promise). */
type AdminCall = Exclude<keyof TaskAdmin, 'forGroup' | 'deletePrefix' | 'group'>;
