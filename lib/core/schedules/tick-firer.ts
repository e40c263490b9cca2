import {
  parseScheduleRecord,
  parseScheduleState,
  tickGap,
  tickTaskId,
  ticksToFire,
  type ScheduleRecord,
  type ScheduleState,
} from '../model/schedule.js';
import { DEFAULT_TASK_LIMITS } from '../config/options.js';
import { prepareTask, type ItemLimits } from '../producer/task-items.js';
import type { QueueKeys } from '../redis/keys.js';
import { scheduleGatewayOf, type DueSchedule, type ScheduleGateway } from '../redis/schedule-gateway.js';
import type { TaskStore } from '../redis/store.js';
import type { TaskLogger } from '../support/logger.js';

/** What one tick of a schedule came to, told once (by the process that moved the schedule on). */
export interface ScheduleTickEvent {
  readonly scheduleId: string;
  readonly pattern: string;
  /** The tick (Redis time, ms); for `missed`, the first of the ticks passed over. */
  readonly tick: number;
  /**
   * `fired`: the tick produced a task (`taskId`); `skipped`: the previous task (`heldBy`) was still pending,
   * delayed or running (`overlap: 'skip'`); `missed`: `count` ticks passed while nothing ran (`missed`).
   */
  readonly outcome: 'fired' | 'skipped' | 'missed';
  readonly taskId?: string;
  readonly heldBy?: string;
  readonly count?: number;
}

/** The limits a schedule's tasks are checked against where no producer's options apply (the admin API). */
export const SCHEDULE_LIMITS: ItemLimits = DEFAULT_TASK_LIMITS;

/** How long the previous task of a schedule holds back the next ticks at most (`overlap: 'skip'`). */
export const OVERLAP_HOLD_MS = 24 * 3_600_000;
/** The deduplication key of a schedule's live task (`overlap: 'skip'`). */
export function overlapKey(scheduleId: string): string {
  return `schedule:${scheduleId}`;
}

/**
 * Fires the due ticks of one schedule, exactly once each whoever else fires them: each tick's task is
 * written by enqueueTasks under a call record named for the tick (`sch.<id>.<tick>`), so a second
 * process firing the same tick, a resend, or a retry after a crash between the write and the advance
 * finds the first write's answer and writes nothing; then advanceSchedule moves the schedule on from
 * that tick once (compare and set), and only the process whose advance succeeded reports the ticks.
 */
export class TickFirer {
  private readonly gateway: ScheduleGateway;

  constructor(
    private readonly store: TaskStore,
    private readonly limits: ItemLimits,
    private readonly logger: TaskLogger,
  ) {
    this.gateway = scheduleGatewayOf(store.redis);
  }

  /**
   * Fires what `due` owes at Redis time `now`: the events to report (none when another process moved it
   * on first), and the schedule's next tick (undefined: it ended, or is gone).
   */
  async fire(due: DueSchedule, now: number): Promise<{ events: ScheduleTickEvent[]; next?: number }> {
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
    const plan = ticksToFire(spec, due.tick, now, record.anchor);
    const queue = await this.queueOf(record);
    const events: ScheduleTickEvent[] = [];
    for (const tick of plan.fire) events.push(await this.fireTick(due.id, record, queue, tick, now));
    if (plan.missed > 0) {
      events.push({ scheduleId: due.id, pattern: spec.pattern, tick: due.tick, outcome: 'missed', count: plan.missed });
    }
    const state = nextState(parseScheduleState(due.state), events, plan.fire.at(-1) ?? due.tick, now);
    const advanced = await this.gateway.advance(
      keys,
      due.id,
      record.version,
      due.tick,
      plan.next,
      JSON.stringify(state),
    );
    return { events: advanced ? events : [], next: plan.next };
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
    // Kept while any process could still fire this tick again: ten gaps (and the ticks `missed` may fire).
    const keep = typeof spec.missed === 'object' ? spec.missed.max : 1;
    const ttlSeconds = Math.min(
      30 * 86_400,
      Math.max(60, Math.ceil(((keep + 10) * tickGap(spec, tick, record.anchor)) / 1_000)),
    );
    const answer = await this.gateway.enqueueOnce(queue, recordId, ttlSeconds, task);
    const base = { scheduleId, pattern: spec.pattern, tick };
    return answer === 0 ? { ...base, outcome: 'fired', taskId } : { ...base, outcome: 'skipped', heldBy: answer };
  }

  /** The shard a schedule's tasks go to: its client's, as a producer would pick it. */
  async queueOf(record: ScheduleRecord): Promise<QueueKeys> {
    const layout = await this.store.layouts.layout(record.spec.pattern);
    return layout.shardOf(record.spec.clientId);
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
  let lastTaskId = previous.lastTaskId;
  let lastFiredAt = previous.lastFiredAt;
  let lastOutcome = previous.lastOutcome;
  for (const event of events) {
    if (event.outcome === 'fired') {
      fired++;
      lastTaskId = event.taskId;
      lastFiredAt = now;
    } else if (event.outcome === 'skipped') {
      skipped++;
    } else {
      missed += event.count ?? 0;
    }
    if (event.outcome !== 'missed') lastOutcome = event.outcome;
  }
  if (events.length > 0 && events.every((event) => event.outcome === 'missed')) lastOutcome = 'missed';
  return { lastTick, lastOutcome, lastTaskId, lastFiredAt, fired, skipped, missed };
}
