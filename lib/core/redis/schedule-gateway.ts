import type { PreparedTask } from '../model/prepared-task.js';
import { pushEnqueueFields } from './gateway.js';
import type { QueueKeys, ScheduleKeys } from './keys.js';
import { perConnection } from './per-connection.js';
import { CALL_MARKER } from './script-command.js';
import type { TaskRedis } from './scripts.js';

/** A schedule whose tick has come, as dueSchedules read it. */
export interface DueSchedule {
  readonly id: string;
  /** The tick it is due at (Redis time, ms). */
  readonly tick: number;
  /** The stored schedule (`<version>|<flags>|<anchor>|<source>|<spec JSON>`), or null when it is gone. */
  readonly stored: string | null;
  /** What its last ticks did (JSON), or null. */
  readonly state: string | null;
}

/** What a check of the due set found: Redis time, the earliest tick after it (0: none), the due ones. */
export interface DueCheck {
  readonly now: number;
  readonly later: number;
  readonly due: readonly DueSchedule[];
}

/**
 * The schedule scripts, one method each (like ScriptGateway for the queues): changeSchedule,
 * dueSchedules, advanceSchedule, and a tick's task written through enqueueTasks under a call record
 * named for the tick, which makes every later fire of that tick (another process, a resend, a retry
 * after a crash) find the first one's answer instead of writing a second task.
 */
export class ScheduleGateway {
  constructor(private readonly redis: TaskRedis) {}

  /** changeSchedule: see its header for each operation's arguments and answer. */
  change(
    keys: ScheduleKeys,
    op: 'upsert' | 'pause' | 'resume' | 'orphan' | 'remove',
    id: string,
    ...args: (string | number)[]
  ): Promise<string | number> {
    return this.redis.changeSchedule(keys.records, keys.due, keys.state, op, id, ...args);
  }

  /** dueSchedules: the schedules due by Redis time (at most `limit`). */
  async due(keys: ScheduleKeys, limit: number): Promise<DueCheck> {
    const reply = await this.redis.dueSchedules(keys.records, keys.due, keys.state, limit);
    const due: DueSchedule[] = [];
    for (let i = 2; i + 3 < reply.length; i += 4) {
      due.push({
        id: String(reply[i]),
        tick: Number(reply[i + 1]),
        stored: typeof reply[i + 2] === 'string' ? (reply[i + 2] as string) : null,
        state: typeof reply[i + 3] === 'string' ? (reply[i + 3] as string) : null,
      });
    }
    return { now: Number(reply[0]), later: Number(reply[1]), due };
  }

  /** advanceSchedule: true when this call moved the schedule on from `tick` (the first of all firers). */
  async advance(
    keys: ScheduleKeys,
    id: string,
    version: string,
    tick: number,
    next: number | undefined,
    state: string,
  ): Promise<boolean> {
    return (
      (await this.redis.advanceSchedule(keys.records, keys.due, keys.state, id, version, tick, next ?? 0, state)) === 1
    );
  }

  /**
   * enqueueTasks with the call record `recordId` (mode '2': answered from the record when any earlier
   * call with that id ran, else written now): 0 when the task is written (now or by that earlier call),
   * or the id of the live task that holds its deduplication key (refused).
   */
  async enqueueOnce(queue: QueueKeys, recordId: string, ttlSeconds: number, task: PreparedTask): Promise<0 | string> {
    const args: (string | number)[] = [`${CALL_MARKER}2${ttlSeconds}.${recordId}`];
    pushEnqueueFields(args, task);
    const results = await this.redis.enqueueTasks(queue.root, ...args);
    if (!Array.isArray(results) || results.length !== 1) throw new Error('enqueueTasks answered a tick unexpectedly');
    return results[0];
  }
}

export const scheduleGatewayOf = perConnection((redis) => new ScheduleGateway(redis));
