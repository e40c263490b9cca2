import type { MessageHandler } from '@nestjs/microservices';
import { InvalidScheduleError } from '../core/model/errors.js';
import { checkSchedule, type ScheduleSpec } from '../core/model/schedule.js';

/**
 * Where `@EventPattern` keeps a handler's extras (`PATTERN_EXTRAS_METADATA` of @nestjs/microservices, the
 * same in Nest 11 and 12; its module path is not exported, so it is named here).
 */
const PATTERN_EXTRAS_METADATA = 'microservices:pattern_extras';

/** The handler extra under which `@TaskSchedule` declares its schedules (read by the transport). */
export const SCHEDULES_EXTRA = 'redisTaskSchedules';

/** A schedule as a decorator declares it: its pattern is the handler's. */
export type TaskScheduleSpec = Omit<ScheduleSpec, 'pattern'>;

/** What `@TaskSchedule` puts in a handler's extras. */
export interface DeclaredTaskSchedule {
  readonly id: string;
  readonly spec: TaskScheduleSpec;
}

/**
 * Declares a recurring schedule on the handler beside its `@EventPattern`: stored when a worker with this
 * handler starts (replicas starting at once leave one schedule), each tick one task of the handler's
 * pattern, however many processes run. A schedule whose decorator leaves the code stops firing and is
 * reported as orphaned (`listSchedules()`, the CLI), not kept firing.
 *
 * ```ts
 * @TaskSchedule('nightly-report', { cron: '0 3 * * *', tz: 'Europe/Berlin' })
 * @EventPattern('report.build')
 * build(@Payload() payload: unknown) { ... }
 * ```
 */
export function TaskSchedule(id: string, spec: TaskScheduleSpec): MethodDecorator {
  return (_target, _key, descriptor) => {
    const handler = descriptor.value as object;
    const extras = (Reflect.getMetadata(PATTERN_EXTRAS_METADATA, handler) ?? {}) as Record<string, unknown>;
    const declared = (extras[SCHEDULES_EXTRA] ?? []) as readonly DeclaredTaskSchedule[];
    // Merged like @EventPattern merges its extras: the order of the two decorators does not matter.
    Reflect.defineMetadata(
      PATTERN_EXTRAS_METADATA,
      // spread-ok: once per decorated handler, at class definition
      { ...extras, [SCHEDULES_EXTRA]: [...declared, { id, spec }] },
      handler,
    );
    return descriptor;
  };
}

/**
 * The schedules the handlers declare, each with its handler's pattern, checked (InvalidScheduleError
 * naming the schedule and the field, before the worker connects). An id declared twice is refused.
 */
export function declaredSchedules(handlers: ReadonlyMap<string, MessageHandler>): { id: string; spec: ScheduleSpec }[] {
  const found: { id: string; spec: ScheduleSpec }[] = [];
  for (const [pattern, handler] of handlers) {
    const declared = (handler.extras?.[SCHEDULES_EXTRA] ?? []) as readonly DeclaredTaskSchedule[];
    for (const { id, spec } of declared) {
      // spread-ok: once per declared schedule, at start
      const full: ScheduleSpec = { ...spec, pattern };
      checkSchedule(id, full);
      const twice = found.find((other) => other.id === id);
      if (twice) {
        throw new InvalidScheduleError(id, `is declared twice, on "${twice.spec.pattern}" and on "${pattern}"`);
      }
      found.push({ id, spec: full });
    }
  }
  return found;
}
