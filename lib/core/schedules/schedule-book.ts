import { ScheduleHeldError, ScheduleNotFoundError } from '../model/errors.js';
import {
  checkSchedule,
  nextTick,
  nextTicks,
  parseScheduleRecord,
  parseScheduleState,
  type ScheduleRecord,
  type ScheduleSpec,
  type ScheduleState,
  type StoredSpec,
} from '../model/schedule.js';
import { newTaskId, prepareTask, type ItemLimits } from '../producer/task-items.js';
import type { ScheduleGateway } from '../redis/schedule-gateway.js';
import type { TaskStore } from '../redis/store.js';
import type { TaskLogger } from '../support/logger.js';
import { TickFirer } from './tick-firer.js';

/** A schedule as `listSchedules()` shows it. */
export interface ScheduleInfo {
  readonly id: string;
  readonly spec: StoredSpec;
  /** Paused by an operator (no tick fires until `resumeSchedule`). */
  readonly paused: boolean;
  /** Its `@TaskSchedule` decorator left the code of a worker running its pattern: it fires no more (remove it, or put the decorator back). */
  readonly orphaned: boolean;
  /** `code`: registered by a `@TaskSchedule` decorator; `api`: by `upsertSchedule`. */
  readonly source: 'api' | 'code';
  /** Bumped by every change of the spec. */
  readonly version: number;
  /** The next ticks (up to 3, Redis time in ms); none while paused, orphaned or ended. */
  readonly nextTicks: readonly number[];
  /** No tick is left (past `endAt`): neither paused nor orphaned, it will not fire again. */
  readonly ended: boolean;
  /** What its ticks did: the last one, its task, and counts of fired, skipped, missed and held ticks. */
  readonly state: ScheduleState;
  /**
   * Why its ticks produce nothing now, while they do not: its pattern's shard count is not on record yet (no
   * worker or producer has used it), so ticks are held (see `state.held`). Undefined while it fires.
   */
  readonly heldReason?: string;
}

/** What `triggerSchedule` did: a task written now, or none because the previous one still runs (`overlap: 'skip'`). */
export type TriggerResult =
  { readonly fired: true; readonly taskId: string } | { readonly fired: false; readonly heldBy: string };

/** What `upsertSchedule` did: stored a new schedule, a new version of one, or found the same spec stored. */
export type UpsertResult = 'created' | 'updated' | 'unchanged';

/**
 * The recurring schedules of a prefix, for the admin API, the CLI, the dashboard and the decorators: store
 * (idempotent: replicas storing the same spec at once leave one schedule), list, pause, resume, trigger,
 * remove. The ticks themselves are fired by every process's ScheduleTicker.
 */
export class ScheduleBook {
  private readonly gateway: ScheduleGateway;
  private readonly firer: TickFirer;

  constructor(
    private readonly store: TaskStore,
    private readonly limits: ItemLimits,
    logger: TaskLogger,
  ) {
    this.gateway = store.gateway.schedules;
    this.firer = new TickFirer(store, limits, logger);
  }

  /** Stores `spec` under `id` (checked first; nothing is written when it is invalid). A new spec takes effect from its next tick. */
  async upsert(id: string, spec: ScheduleSpec, source: 'api' | 'code' = 'api'): Promise<UpsertResult> {
    const stored = checkSchedule(id, spec);
    // The payload as its tasks will carry it: too large a payload fails here, not at every tick.
    prepareTask({ id, payload: stored.payload ?? null, clientId: stored.clientId }, 0, undefined, this.limits);
    const now = await this.redisNow();
    const next = nextTick(stored, now, now) ?? 0;
    const answer = await this.gateway.change(this.keys, 'upsert', id, JSON.stringify(stored), source, now, next);
    return answer as UpsertResult;
  }

  /** Removes a schedule (its ticks stop; a task it already produced runs). False when there was none. */
  async remove(id: string): Promise<boolean> {
    return (await this.gateway.change(this.keys, 'remove', id)) === 1;
  }

  /** Stops a schedule's ticks until `resume`. */
  async pause(id: string): Promise<void> {
    if ((await this.gateway.change(this.keys, 'pause', id)) !== 1) throw new ScheduleNotFoundError(id);
  }

  /** Marks a decorator's schedule that left the code: it fires no more, and `listSchedules()` says why. */
  async orphan(id: string): Promise<boolean> {
    return (await this.gateway.change(this.keys, 'orphan', id)) === 1;
  }

  /** Resumes a paused (or orphaned) schedule from its next tick after now: the ticks of the pause are not made up. */
  async resume(id: string): Promise<void> {
    for (let attempt = 0; attempt < 3; attempt++) {
      const record = await this.record(id);
      const now = await this.redisNow();
      const next = nextTick(record.spec, now, record.anchor) ?? 0;
      const answer = await this.gateway.change(this.keys, 'resume', id, record.version, next);
      if (answer === 1) return;
      if (answer === 0) throw new ScheduleNotFoundError(id);
      // -1: its spec changed meanwhile; read it again.
    }
    throw new Error(`schedule "${id}" kept changing while it was resumed; try again`);
  }

  /** One task now, outside the rhythm (the schedule's next ticks are unchanged); with `overlap: 'skip'`, none while the previous one lives. */
  async trigger(id: string): Promise<TriggerResult> {
    const record = await this.record(id);
    const now = await this.redisNow();
    const layout = await this.firer.layoutOf(record.spec.pattern);
    if (!layout) throw new ScheduleHeldError(id, record.spec.pattern);
    const queue = layout.shardOf(record.spec.clientId);
    const callId = newTaskId();
    const taskId = `${id}@manual.${callId}`;
    const event = await this.firer.fireTick(id, record, queue, now, now, `sch.${id}.manual.${callId}`, taskId);
    return event.outcome === 'fired' ? { fired: true, taskId } : { fired: false, heldBy: event.heldBy ?? '' };
  }

  /** Every schedule with its spec, state and next 3 ticks, by id. */
  async list(): Promise<ScheduleInfo[]> {
    const keys = this.keys;
    const redis = this.store.redis;
    const [records, states, due, firing] = await Promise.all([
      redis.hgetall(keys.records) as Promise<Record<string, string>>,
      redis.hgetall(keys.state) as Promise<Record<string, string>>,
      redis.zrange(keys.due, '0', '-1', 'WITHSCORES'),
      redis.hgetall(keys.firing) as Promise<Record<string, string>>,
    ]);
    const dueAt = new Map<string, number>();
    for (let i = 0; i + 1 < due.length; i += 2) {
      // An entry a process has taken is scored at its lease's end; the tick it fires is in its firing entry.
      const [took, ends] = (firing[due[i]] ?? '').split('|');
      dueAt.set(due[i], ends !== undefined && Number(ends) === Number(due[i + 1]) ? Number(took) : Number(due[i + 1]));
    }
    const infos: ScheduleInfo[] = [];
    for (const id of Object.keys(records).sort()) {
      const record = parseScheduleRecord(records[id]);
      if (!record) continue;
      const first = dueAt.get(id);
      const ticks = first === undefined ? [] : [first, ...nextTicks(record.spec, first, record.anchor, 2)];
      infos.push(infoOf(id, record, ticks, parseScheduleState(states[id] ?? null)));
    }
    return infos;
  }

  private get keys() {
    return this.store.keys.schedules;
  }

  private async record(id: string): Promise<ScheduleRecord> {
    const stored = await this.store.redis.hget(this.keys.records, id);
    const record = stored === null ? undefined : parseScheduleRecord(stored);
    if (!record) throw new ScheduleNotFoundError(id);
    return record;
  }

  private async redisNow(): Promise<number> {
    const [seconds, micros] = await this.store.redis.time();
    return Number(seconds) * 1_000 + Math.floor(Number(micros) / 1_000);
  }
}

function infoOf(id: string, record: ScheduleRecord, nextTicks: number[], state: ScheduleState): ScheduleInfo {
  return {
    id,
    spec: record.spec,
    paused: record.paused,
    orphaned: record.orphaned,
    source: record.source,
    version: Number(record.version),
    nextTicks,
    ended: !record.paused && !record.orphaned && nextTicks.length === 0,
    state,
    ...(state.heldReason === undefined ? {} : { heldReason: state.heldReason }),
  };
}
