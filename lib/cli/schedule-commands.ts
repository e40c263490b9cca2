import type { ScheduleInfo, TaskAdmin } from '../core/admin/admin.js';
import { ScheduleNotFoundError } from '../core/model/errors.js';
import { table } from './format.js';

/** The `schedules` commands' failures, as the CLI reports them. */
export interface ScheduleCliErrors {
  usage(message: string): Error;
  notFound(message: string): Error;
}

const json = (value: unknown) => JSON.stringify(value, null, 2);

/** `schedules list|pause|resume|trigger|remove`. */
export async function schedules(
  admin: TaskAdmin,
  args: readonly string[],
  options: { readonly json: boolean },
  errors: ScheduleCliErrors,
): Promise<string> {
  const [verb = 'list', id, ...rest] = args;
  if (verb === 'list') {
    if (args.length > 1) throw errors.usage('schedules list takes no arguments');
    const listed = await admin.listSchedules();
    return options.json ? json(listed) : listing(listed);
  }
  if (!['pause', 'resume', 'trigger', 'remove'].includes(verb)) {
    throw errors.usage(`unknown schedules command "${verb}" (list, pause, resume, trigger, remove)`);
  }
  if (!id || rest.length > 0) throw errors.usage(`schedules ${verb} takes one schedule id`);
  try {
    switch (verb) {
      case 'pause':
        await admin.pauseSchedule(id);
        return options.json ? json({ id, paused: true }) : `schedule ${id}: paused`;
      case 'resume':
        await admin.resumeSchedule(id);
        return options.json ? json({ id, paused: false }) : `schedule ${id}: resumed from its next tick`;
      case 'trigger': {
        const result = await admin.triggerSchedule(id);
        if (options.json) return json(result);
        return result.fired
          ? `schedule ${id}: task ${result.taskId} written`
          : `schedule ${id}: nothing written, its previous task ${result.heldBy} is still pending, delayed or running (overlap: skip)`;
      }
      default: {
        const removed = await admin.removeSchedule(id);
        if (!removed) throw new ScheduleNotFoundError(id);
        return options.json ? json({ id, removed }) : `schedule ${id}: removed`;
      }
    }
  } catch (error) {
    if (error instanceof ScheduleNotFoundError)
      throw errors.notFound(`no schedule "${id}" (schedules list shows them)`);
    throw error;
  }
}

function listing(listed: readonly ScheduleInfo[]): string {
  if (listed.length === 0) return 'no schedules under this prefix';
  const when = (ms: number | undefined) => (ms === undefined ? '-' : new Date(ms).toISOString());
  return table(
    ['id', 'pattern', 'rhythm', 'state', 'next ticks', 'last tick', 'last task', 'fired', 'skipped', 'missed', 'held'],
    listed.map((schedule) => [
      schedule.id,
      schedule.spec.pattern,
      schedule.spec.cron !== undefined
        ? `cron ${schedule.spec.cron}${schedule.spec.tz ? ` (${schedule.spec.tz})` : ''}`
        : `every ${schedule.spec.everyMs} ms`,
      schedule.orphaned
        ? 'ORPHANED (decorator gone)'
        : schedule.paused
          ? 'paused'
          : schedule.ended
            ? 'ended'
            : schedule.heldReason
              ? `HELD (no worker of ${schedule.spec.pattern} yet)`
              : 'active',
      schedule.nextTicks.map((tick) => when(tick)).join(', ') || '-',
      `${when(schedule.state.lastTick)}${schedule.state.lastOutcome ? ` ${schedule.state.lastOutcome}` : ''}`,
      schedule.state.lastTaskId ?? '-',
      schedule.state.fired,
      schedule.state.skipped,
      schedule.state.missed,
      schedule.state.held ?? 0,
    ]),
  );
}
