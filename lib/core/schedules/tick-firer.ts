import {
  parseScheduleRecord,
  parseScheduleState,
  SCHEDULE_GRACE_MS,
  tickGap,
  tickTaskId,
  ticksToFire,
  type ScheduleRecord,
  type ScheduleState,
  type SeenTicks,
  type TickPlan,
} from '../model/schedule.js';
import { DEFAULT_TASK_LIMITS } from '../config/options.js';
import { prepareTask, type ItemLimits } from '../producer/task-items.js';
import type { QueueKeys, QueueLayout } from '../redis/keys.js';
import type { DueSchedule, ScheduleGateway } from '../redis/schedule-gateway.js';
import type { TaskStore } from '../redis/store.js';
import type { TaskLogger } from '../support/logger.js';

/** What one tick of a schedule came to, told once (by the process that moved the schedule on). */
export interface ScheduleTickEvent {
  readonly scheduleId: string;
  readonly pattern: string;
  /** The tick (Redis time, ms); for `missed` and `held`, the first of the ticks passed over. */
  readonly tick: number;
  /**
   * `fired`: the tick produced a task (`taskId`); `skipped`: the previous task (`heldBy`) was still pending,
   * delayed or running (`overlap: 'skip'`); `missed`: `count` ticks passed while no process ran (`missed`);
   * `held`: `count` ticks produced nothing because no worker or producer had used the pattern yet (its
   * shard count was not on record, and a schedule never decides it).
   */
  readonly outcome: 'fired' | 'skipped' | 'missed' | 'held';
  readonly taskId?: string;
  readonly heldBy?: string;
  readonly count?: number;
}

/** What the fires of one take share: Redis time, the ticks a working deployment saw, the layouts on record. */
export interface TakeContext {
  readonly now: number;
  /** Ticks seen while on time by processes busy since: fired late, never missed (see ticksToFire). */
  readonly seen: SeenTicks;
  // table-ok: lives for one take
  readonly layouts: Map<string, Promise<QueueLayout | undefined>>;
}

/** The shortest life of a tick's call record (s). */
const MIN_TICK_RECORD_S = 20;

/** How soon a held tick (its pattern's shard count not on record yet) is looked at again (ms). */
export const HOLD_RECHECK_MS = 1_000;

/** The limits a schedule's tasks are checked against where no producer's options apply (the admin API). */
export const SCHEDULE_LIMITS: ItemLimits = DEFAULT_TASK_LIMITS;

/** How long the previous task of a schedule holds back the next ticks at most (`overlap: 'skip'`). */
export const OVERLAP_HOLD_MS = 24 * 3_600_000;
/** The deduplication key of a schedule's live task (`overlap: 'skip'`). */
export function overlapKey(scheduleId: string): string {
  return `schedule:${scheduleId}`;
}

/**
 * Fires the due ticks of one schedule taken by this process (claimSchedules), exactly once each whoever
 * else fires them: each tick's task is written by enqueueTasks under a call record named for the tick
 * (`sch.<id>.<tick>`), so a process that takes the schedule again after this one's lease ended, a resend,
 * or a retry after a crash between the write and the advance finds the first write's answer and writes
 * nothing; then advanceSchedule records what the ticks did and moves the schedule on, once, for the holder
 * of the take only, and only that process reports the ticks.
 */
export class TickFirer {
  private readonly gateway: ScheduleGateway;

  constructor(
    private readonly store: TaskStore,
    private readonly limits: ItemLimits,
    private readonly logger: TaskLogger,
  ) {
    this.gateway = store.gateway.schedules;
  }

  /** A take's context at Redis time `now`, in a run of takes (see claimSchedules-5.lua). */
  static context(now: number, run: SeenTicks): TakeContext {
    return { now, seen: run, layouts: new Map() };
  }

  /**
   * Fires what the taken schedule `due` owes: the events to report (none when its take was no longer this
   * process's: another fired the same ticks, which their call records keep to one task each, and reports
   * them), and the schedule's next tick (undefined: it ended, is gone, or waits for its pattern).
   */
  async fire(due: DueSchedule, take: TakeContext): Promise<{ events: ScheduleTickEvent[]; next?: number }> {
    const keys = this.store.keys.schedules;
    const record = due.stored === null ? undefined : parseScheduleRecord(due.stored);
    if (!record) {
      // A due entry with no schedule (or a value this library did not write): it could only fire nothing.
      await this.gateway.change(keys, 'remove', due.id);
      this.logger.warn(
        `removed schedule "${due.id}": ${due.stored === null ? 'its due entry had no schedule' : 'its stored value is not a schedule'}`,
      );
      return { events: [] };
    }
    const { spec } = record;
    const { now } = take;
    const previous = parseScheduleState(due.state);
    const plan = ticksToFire(spec, due.tick, now, record.anchor, take.seen);
    const queue = await this.layoutOf(spec.pattern, take);
    if (!queue) return this.hold(due, record, plan, previous, now);
    const events: ScheduleTickEvent[] = [];
    // The gap between ticks (how long a tick's call record is kept), from the plan: no cron computed again.
    const last = plan.fire.at(-1) ?? due.tick;
    const gap = spec.everyMs ?? (plan.next === undefined ? 60_000 : Math.max(1_000, plan.next - last));
    for (const tick of plan.fire) {
      const shard = queue.shardOf(spec.clientId);
      events.push(await this.fireTick(due.id, record, shard, tick, now, `sch.${due.id}.${tick}`, undefined, gap));
    }
    if (plan.missed > 0) {
      events.push({ scheduleId: due.id, pattern: spec.pattern, tick: due.tick, outcome: 'missed', count: plan.missed });
    }
    const state = nextState(previous, events, plan.fire.at(-1) ?? due.tick, now);
    const finished = await this.gateway.advance(keys, due, record.version, plan.next, JSON.stringify(state));
    return { events: finished ? events : [], next: plan.next };
  }

  /**
   * The pattern's shard count is not on record (no worker or producer used it yet): nothing is fired, for a
   * schedule must never decide how many shards a pattern has. A tick still within the grace is looked at
   * again in a second (a deploy that stores schedules before its workers start loses no tick); past it, the
   * ticks are counted held and the schedule moves on.
   */
  private async hold(
    due: DueSchedule,
    record: ScheduleRecord,
    plan: TickPlan,
    previous: ScheduleState,
    now: number,
  ): Promise<{ events: ScheduleTickEvent[]; next?: number }> {
    const { spec } = record;
    const keys = this.store.keys.schedules;
    const heldReason = `no worker or producer has used pattern "${spec.pattern}" yet (its shard count is not on record): ticks are held until one does`;
    const againAt = now + HOLD_RECHECK_MS;
    if (now - due.tick <= SCHEDULE_GRACE_MS && (plan.next === undefined || plan.next > againAt)) {
      const waiting: ScheduleState = { ...previous, lastOutcome: 'held', heldReason };
      await this.gateway.advance(keys, due, record.version, { againAt }, JSON.stringify(waiting));
      return { events: [], next: againAt };
    }
    const events: ScheduleTickEvent[] = [];
    if (plan.fire.length > 0) {
      events.push({
        scheduleId: due.id,
        pattern: spec.pattern,
        tick: due.tick,
        outcome: 'held',
        count: plan.fire.length,
      });
    }
    if (plan.missed > 0) {
      events.push({ scheduleId: due.id, pattern: spec.pattern, tick: due.tick, outcome: 'missed', count: plan.missed });
    }
    const state = { ...nextState(previous, events, plan.fire.at(-1) ?? due.tick, now), heldReason };
    const finished = await this.gateway.advance(keys, due, record.version, plan.next, JSON.stringify(state));
    return { events: finished ? events : [], next: plan.next };
  }

  /** One tick's task (or, with `overlap: 'skip'` while the previous one lives, none). */
  async fireTick(
    scheduleId: string,
    record: ScheduleRecord,
    queue: QueueKeys,
    tick: number,
    now: number,
    recordId = `sch.${scheduleId}.${tick}`,
    taskId = tickTaskId(scheduleId, tick),
    gap = tickGap(record.spec, tick, record.anchor),
  ): Promise<ScheduleTickEvent> {
    const { spec } = record;
    const task = prepareTask(
      {
        id: taskId,
        payload: spec.payload ?? null,
        clientId: spec.clientId,
        deduplicationKey: spec.overlap === 'skip' ? overlapKey(scheduleId) : undefined,
        deduplicationTtlMs: spec.overlap === 'skip' ? OVERLAP_HOLD_MS : undefined,
      },
      now,
      undefined,
      this.limits,
    );
    // Kept while any process could still fire this tick again: ten gaps (and the ticks `missed` may fire),
    // at least a take's lease and the grace twice over (a take sent again, a firer killed and its take retaken).
    const keep = typeof spec.missed === 'object' ? spec.missed.max : 1;
    const ttlSeconds = Math.min(30 * 86_400, Math.max(MIN_TICK_RECORD_S, Math.ceil(((keep + 10) * gap) / 1_000)));
    const answer = await this.gateway.enqueueOnce(queue, recordId, ttlSeconds, task);
    const base = { scheduleId, pattern: spec.pattern, tick };
    return answer === 0 ? { ...base, outcome: 'fired', taskId } : { ...base, outcome: 'skipped', heldBy: answer };
  }

  /**
   * The layout of the pattern a schedule's tasks go to, as on record (undefined: no worker or producer used
   * it yet, so its shard count is not decided). Read once per take.
   */
  layoutOf(pattern: string, take?: TakeContext): Promise<QueueLayout | undefined> {
    let layout = take?.layouts.get(pattern);
    if (!layout) {
      layout = this.store.layouts.onRecord(pattern);
      take?.layouts.set(pattern, layout);
    }
    return layout;
  }
}

/** The schedule's state after `events` (ticks up to `lastTick` handled at Redis time `now`). */
function nextState(
  previous: ScheduleState,
  events: readonly ScheduleTickEvent[],
  lastTick: number,
  now: number,
): ScheduleState {
  let { fired, skipped, missed } = previous;
  let held = previous.held ?? 0;
  let lastTaskId = previous.lastTaskId;
  let lastFiredAt = previous.lastFiredAt;
  let lastOutcome = previous.lastOutcome;
  let heldReason = previous.heldReason;
  for (const event of events) {
    if (event.outcome === 'fired') {
      fired++;
      lastTaskId = event.taskId;
      lastFiredAt = now;
    } else if (event.outcome === 'skipped') {
      skipped++;
    } else if (event.outcome === 'held') {
      held += event.count ?? 0;
    } else {
      missed += event.count ?? 0;
    }
    if (event.outcome === 'fired' || event.outcome === 'skipped') heldReason = undefined;
    if (event.outcome !== 'missed') lastOutcome = event.outcome;
  }
  if (events.length > 0 && events.every((event) => event.outcome === 'missed')) lastOutcome = 'missed';
  return { lastTick, lastOutcome, lastTaskId, lastFiredAt, fired, skipped, missed, held, heldReason };
}
