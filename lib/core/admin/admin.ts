import { validateGroup } from '../config/rules.js';
import { DEFAULT_GROUP } from '../redis/keys.js';
import { TaskStore } from '../redis/store.js';
import type { RedisConnection, TaskRedis } from '../redis/scripts.js';

/** A connection with this package's scripts on it, as the admin parts take it. */
export type TaskAdminRedis = TaskRedis;
import type { DeadLetterRecord } from '../model/dead-letter.js';
import {
  DeadLetters,
  type DeadLetterFilter,
  type DeadLetterPage,
  type DeadLetterSelection,
  type RequeueDeadLettersResult,
} from './dead-letters.js';
import { ConsumerGroups, type RemovedGroup } from './groups.js';
import { deletePrefix, type DeletedPrefix } from './prefix-cleanup.js';
import { QueueSettings } from './settings.js';
import { QueueStatsReader, type QueueStats, type WorkerInfo } from './stats.js';
import type { ScheduleSpec } from '../model/schedule.js';
import { ScheduleBook, type ScheduleInfo, type TriggerResult, type UpsertResult } from '../schedules/schedule-book.js';
import { SCHEDULE_LIMITS } from '../schedules/tick-firer.js';
import { silentLogger } from '../support/logger.js';
import { TaskLookup } from './tasks.js';
import { BatchReader } from './batches.js';
import { FlowReader } from './flows.js';
import type { FlowCancelResult, FlowStatus } from '../model/flow.js';
import type { BatchCancelResult, BatchStatus } from '../model/batch.js';
import type { CancelResult, TaskStatus } from '../model/task-status.js';

export {
  selects,
  type DeadLetterFilter,
  type DeadLetterPage,
  type DeadLetterSelection,
  type RequeueDeadLettersResult,
} from './dead-letters.js';
export type { RemovedGroup } from './groups.js';
export { MAX_WEIGHT } from './settings.js';
export type { QueueCounters, QueueFault, QueueStats, WorkerInfo } from './stats.js';
export type { ScheduleInfo, TriggerResult, UpsertResult } from '../schedules/schedule-book.js';

/**
 * The admin API of a prefix (Nest-agnostic; `RedisTaskAdmin` exposes it in Nest, the CLI runs it): a
 * facade over its parts, stats, settings, consumer groups and dead letters. A sharded queue's shards
 * are read in shard order, as one list; the shard count is the one on record in Redis.
 */
export class TaskAdmin {
  private readonly statsPart: QueueStatsReader;
  private readonly settingsPart: QueueSettings;
  private readonly groupsPart: ConsumerGroups;
  private readonly deadLettersPart: DeadLetters;
  private readonly schedulesPart: ScheduleBook;
  private readonly tasksPart: TaskLookup;
  private readonly batchesPart: BatchReader;
  private readonly flowsPart: FlowReader;

  constructor(
    private readonly store: TaskStore,
    /** The consumer group whose copies this admin reads and changes. */
    readonly group = DEFAULT_GROUP,
  ) {
    this.statsPart = new QueueStatsReader(store, group);
    this.settingsPart = new QueueSettings(store, group);
    this.groupsPart = new ConsumerGroups(store, group);
    this.deadLettersPart = new DeadLetters(store, group);
    this.schedulesPart = new ScheduleBook(store, SCHEDULE_LIMITS, silentLogger);
    this.tasksPart = new TaskLookup(store, group);
    this.batchesPart = new BatchReader(store, group);
    this.flowsPart = new FlowReader(store, group);
  }

  /** A flow by id: every node's state, result or error (`unknown`: never created, or expired). */
  getFlow(id: string): Promise<FlowStatus> {
    return this.flowsPart.get(id);
  }

  /** Cancels a flow (see `FlowReader.cancel`). */
  cancelFlow(id: string, reason?: string): Promise<FlowCancelResult> {
    return this.flowsPart.cancel(id, reason);
  }

  /** Flows created and ended under the prefix. */
  flowCounts(): Promise<{ created: number; succeeded: number; failed: number; cancelled: number }> {
    return this.flowsPart.counts();
  }

  /** A batch's counts and callback state by id (`unknown`: never opened, or its record expired). */
  getBatch(id: string): Promise<BatchStatus> {
    return this.batchesPart.get(id);
  }

  /** Batches opened and completed under the prefix. */
  batchCounts(): Promise<{ opened: number; completed: number }> {
    return this.batchesPart.counts();
  }

  /** Cancels a batch (see `BatchReader.cancel`). */
  cancelBatch(id: string): Promise<BatchCancelResult> {
    return this.batchesPart.cancel(id);
  }

  /** A tracked task's status by id (`unknown`: not tracked, or its index expired). Reads, never scans. */
  getTask(queue: string, id: string): Promise<TaskStatus> {
    return this.tasksPart.get(queue, id);
  }

  /** Cancels a tracked task wherever it is, in every consumer group (see `TaskLookup.cancel`). */
  cancelTask(queue: string, id: string, reason?: string): Promise<CancelResult> {
    return this.tasksPart.cancel(queue, id, reason);
  }

  /**
   * Stores a recurring schedule (`spec` checked first: nothing is written when it is invalid). Replicas
   * storing the same spec at once leave one schedule; a changed spec takes effect from its next tick.
   */
  upsertSchedule(id: string, spec: ScheduleSpec): Promise<UpsertResult> {
    return this.schedulesPart.upsert(id, spec);
  }

  /** Removes a schedule: no more ticks (a task it already produced still runs). False when there was none. */
  removeSchedule(id: string): Promise<boolean> {
    return this.schedulesPart.remove(id);
  }

  /** Every schedule: spec, paused or orphaned, next 3 ticks, last tick and the task it produced, counts. */
  listSchedules(): Promise<ScheduleInfo[]> {
    return this.schedulesPart.list();
  }

  /** No ticks until `resumeSchedule` (ScheduleNotFoundError when there is no such schedule). */
  pauseSchedule(id: string): Promise<void> {
    return this.schedulesPart.pause(id);
  }

  /** Ticks again from the next one after now (the ticks of the pause are not made up). */
  resumeSchedule(id: string): Promise<void> {
    return this.schedulesPart.resume(id);
  }

  /** One task now, outside the rhythm; with `overlap: 'skip'`, none while the previous task still lives. */
  triggerSchedule(id: string): Promise<TriggerResult> {
    return this.schedulesPart.trigger(id);
  }

  /**
   * The admin of a prefix on a plain ioredis connection (the CLI's): the package's scripts are defined on
   * it first.
   */
  static onConnection(redis: RedisConnection, prefix: string, group = DEFAULT_GROUP): TaskAdmin {
    return new TaskAdmin(TaskStore.onConnection(redis, prefix), group);
  }

  /**
   * The admin of a prefix as tools use it (the Nest admin, the CLI): every queue's shard count read
   * from its record in Redis.
   */
  static forPrefix(redis: TaskRedis, prefix: string, group = DEFAULT_GROUP): TaskAdmin {
    return new TaskAdmin(TaskStore.recorded(redis, prefix), group);
  }

  /** The same operations on another consumer group's copies. */
  forGroup(group: string): TaskAdmin {
    validateGroup('group', group);
    return new TaskAdmin(this.store, group);
  }

  /** Consumer groups registered on a pattern (each gets a copy of every task). */
  groups(queue: string): Promise<string[]> {
    return this.groupsPart.groups(queue);
  }

  /**
   * Unregisters a consumer group from a pattern and deletes its copies: pending, delayed, held by its
   * workers, and its dead letters. Stop the group's workers first (a running one registers it again).
   */
  removeGroup(queue: string, group: string): Promise<RemovedGroup> {
    return this.groupsPart.removeGroup(queue, group);
  }

  /**
   * Depth, in-flight work, delays, dead letters, oldest task age and outcome counters of a queue. Never
   * fails on broken data: a key of the wrong type is read as empty and listed in `faults`.
   */
  stats(queue: string): Promise<QueueStats> {
    return this.statsPart.stats(queue);
  }

  /** Forgets the recorded faults of a queue (after the broken keys were looked at and dealt with). */
  clearFaults(queue: string): Promise<number> {
    return this.statsPart.clearFaults(queue);
  }

  /** Workers registered in the queues (all queues under the prefix when none is given), with their leases. */
  workers(queue?: string): Promise<WorkerInfo[]> {
    return this.statsPart.workers(queue);
  }

  /** True when the queue has pending, delayed, in-flight or dead-lettered tasks, a worker, or a shard count on record. */
  exists(queue: string): Promise<boolean> {
    return this.statsPart.exists(queue);
  }

  /** Queues that have had a worker under this prefix. */
  queues(): Promise<string[]> {
    return this.statsPart.queues();
  }

  /**
   * Gives a client a share of claims proportional to its weight (1 to 1,000; 1, the default, removes
   * it): a client of weight 3 gets three tasks for every one of a client of weight 1 while both have work.
   */
  setClientWeight(queue: string, clientId: string, weight: number): Promise<void> {
    return this.settingsPart.setClientWeight(queue, clientId, weight);
  }

  /**
   * Limits how many tasks of one client start per second (overriding the pattern's `clientRateLimit`),
   * or removes the override with null.
   */
  setClientRateLimit(queue: string, clientId: string, rate: number | null): Promise<void> {
    return this.settingsPart.setClientRateLimit(queue, clientId, rate);
  }

  /** Clients whose weight is not 1. */
  clientWeights(queue: string): Promise<Record<string, number>> {
    return this.settingsPart.clientWeights(queue);
  }

  /** Workers stop claiming from the queue (tasks running finish; producers still enqueue). */
  pause(queue: string): Promise<void> {
    return this.settingsPart.pause(queue);
  }

  /** Workers claim from the queue again; blocked loops are told at once. */
  resume(queue: string): Promise<void> {
    return this.settingsPart.resume(queue);
  }

  /** Dead letters of a queue, newest first. */
  listDeadLetters(queue: string, options: { offset?: number; limit?: number } = {}): Promise<DeadLetterRecord[]> {
    return this.deadLettersPart.listDeadLetters(queue, options);
  }

  /** A page of the dead letters matching a filter, newest first (bounded: see `DeadLetters.findDeadLetters`). */
  findDeadLetters(
    queue: string,
    options: { offset?: number; limit?: number; filter?: DeadLetterFilter } = {},
  ): Promise<DeadLetterPage> {
    return this.deadLettersPart.findDeadLetters(queue, options);
  }

  countDeadLetters(queue: string): Promise<number> {
    return this.deadLettersPart.countDeadLetters(queue);
  }

  /**
   * Gives selected dead letters a fresh run: each goes to the tail of its client's list with its
   * attempts reset, removed from dead letters in the same atomic step (so it runs once, even when two
   * operators requeue it at the same time).
   */
  requeueDeadLetters(queue: string, selection: DeadLetterSelection): Promise<RequeueDeadLettersResult> {
    return this.deadLettersPart.requeueDeadLetters(queue, selection);
  }

  /** Deletes selected dead letters; resolves with how many were removed. */
  purgeDeadLetters(queue: string, selection: DeadLetterSelection): Promise<number> {
    return this.deadLettersPart.purgeDeadLetters(queue, selection);
  }

  /**
   * Deletes every key of this admin's prefix (all its queues, groups, dead letters and settings), refused
   * with `PrefixInUseError`, nothing deleted, while a worker of the prefix is alive.
   */
  deletePrefix(): Promise<DeletedPrefix> {
    return deletePrefix(this.store.redis, this.store.keys.prefix);
  }
}
