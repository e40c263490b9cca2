import type { PreparedTask } from '../model/prepared-task.js';
import { SCHEDULE_GRACE_MS } from '../model/schedule.js';
import { pushEnqueueFields } from './enqueue-fields.js';
import type { QueueKeys, ScheduleKeys } from './keys.js';
import { namedRecord } from './call-record.js';
import type { TaskRedis } from './scripts.js';

/** A schedule whose tick has come, taken for this process to fire by claimSchedules. */
export interface DueSchedule {
  readonly id: string;
  /** The tick it is due at (Redis time, ms). */
  readonly tick: number;
  /** The take (`<tick>|<lease end>`): only its holder finishes the fire (advanceSchedule). */
  readonly take: string;
  /** The stored schedule (`<version>|<flags>|<anchor>|<source>|<spec JSON>`), or null when it is gone. */
  readonly stored: string | null;
  /** What its last ticks did (JSON), or null. */
  readonly state: string | null;
}

/** What a take of the due set found: Redis time, the earliest tick after it (0: none), the due ones taken. */
export interface DueCheck {
  readonly now: number;
  readonly later: number;
  /**
   * The run of takes this one belongs to (takes of due work with no gap longer than the grace between them):
   * its start and the previous take (Redis ms; both 0 when this take starts a run).
   */
  readonly run: { readonly start: number; readonly last: number };
  readonly due: readonly DueSchedule[];
}

/** How long a take holds its schedules (ms): a process that dies firing them leaves them to others then. */
export const TAKE_LEASE_MS = 5_000;
/** How long the run of takes is kept after its last take (ms): a longer gap ends the run anyway. */
const CHECKED_KEEP_MS = SCHEDULE_GRACE_MS + 1_000;

/**
 * The schedule scripts, one method each (like ScriptGateway for the queues): changeSchedule,
 * claimSchedules, advanceSchedule, and a tick's task written through enqueueTasks under a call record
 * named for the tick, which makes every later fire of that tick (another process, a resend, a retry
 * after a crash) find the first one's answer instead of writing a second task.
 */
export class ScheduleGateway {
  constructor(private readonly redis: TaskRedis) {}

  /**
   * changeSchedule: see its header for each operation's arguments and answer. A stored or resumed schedule
   * is announced on `keys.changed`, so tickers sleeping until the earliest tick they knew check again; a
   * lost announcement (the publish failed, this process died right after the write) is found at their
   * backstop check.
   */
  async change(
    keys: ScheduleKeys,
    op: 'upsert' | 'pause' | 'resume' | 'orphan' | 'remove',
    id: string,
    ...args: (string | number)[]
  ): Promise<string | number> {
    const answer = await this.redis.changeSchedule(keys.records, keys.due, keys.state, keys.firing, op, id, ...args);
    if (op === 'upsert' || op === 'resume') await this.redis.publish(keys.changed, '').catch(() => undefined);
    return answer;
  }

  /** claimSchedules: takes the schedules due by Redis time (at most `limit`) for this process to fire. */
  async take(keys: ScheduleKeys, limit: number): Promise<DueCheck> {
    const reply = await this.redis.claimSchedules(
      keys.records,
      keys.due,
      keys.state,
      keys.firing,
      keys.checked,
      limit,
      TAKE_LEASE_MS,
      CHECKED_KEEP_MS,
      SCHEDULE_GRACE_MS,
    );
    const due: DueSchedule[] = [];
    for (let i = 4; i + 4 < reply.length; i += 5) {
      const tick = Number(reply[i + 1]);
      due.push({
        id: String(reply[i]),
        tick,
        take: `${tick}|${Number(reply[i + 4])}`,
        stored: typeof reply[i + 2] === 'string' ? (reply[i + 2] as string) : null,
        state: typeof reply[i + 3] === 'string' ? (reply[i + 3] as string) : null,
      });
    }
    const run = { start: Number(reply[2]), last: Number(reply[3]) };
    return { now: Number(reply[0]), later: Number(reply[1]), run, due };
  }

  /**
   * advanceSchedule: finishes a take, recording `state` and moving the schedule on to `next` (undefined: it
   * ended; `{ againAt }`: the same tick is taken again then). True when the take was still this caller's.
   */
  async advance(
    keys: ScheduleKeys,
    due: DueSchedule,
    version: string,
    next: number | undefined | { readonly againAt: number },
    state: string,
  ): Promise<boolean> {
    const again = typeof next === 'object' ? next.againAt : 0;
    const to = typeof next === 'object' ? -1 : (next ?? 0);
    const answer = await this.redis.advanceSchedule(
      keys.records,
      keys.due,
      keys.state,
      keys.firing,
      due.id,
      version,
      due.take,
      to,
      state,
      again,
    );
    return answer === 1;
  }

  /**
   * enqueueTasks with the call record `recordId` (mode '2': answered from the record when any earlier
   * call with that id ran, else written now): 0 when the task is written (now or by that earlier call),
   * or the id of the live task that holds its deduplication key (refused).
   */
  async enqueueOnce(queue: QueueKeys, recordId: string, ttlSeconds: number, task: PreparedTask): Promise<0 | string> {
    const args: (string | number)[] = [namedRecord(recordId, ttlSeconds)];
    pushEnqueueFields(args, task);
    const results = await this.redis.enqueueTasks(queue.root, ...args);
    if (!Array.isArray(results) || results.length !== 1) throw new Error('enqueueTasks answered a tick unexpectedly');
    return results[0];
  }
}
