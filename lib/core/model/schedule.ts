import { Cron } from 'croner';
import { InvalidScheduleError } from './errors.js';

/** What a schedule does with ticks that passed while no process could fire them (see `ticksToFire`). */
export type MissedPolicy = 'skip' | 'once' | { readonly max: number };

/** A recurring task: which pattern gets a task, when, and with what. */
export interface ScheduleSpec {
  /** The pattern (an `@EventPattern`) each tick's task is emitted to. */
  readonly pattern: string;
  /** A cron expression: 5 fields, or 6 with seconds first (`*\/10 * * * * *`). Exactly one of `cron` and `everyMs`. */
  readonly cron?: string;
  /** A fixed rhythm in ms (at least 100), counted from `startAt` (default: when the schedule was first stored). */
  readonly everyMs?: number;
  /** IANA time zone of `cron` (default UTC): `Europe/Berlin`. Daylight saving as cron does it (see README). */
  readonly tz?: string;
  /** The payload of every tick's task (JSON). */
  readonly payload?: unknown;
  /** The client id the tasks are emitted as (fairness, caps); default `schedules`. */
  readonly clientId?: string;
  /** `skip` (default): a tick whose previous task is still pending, delayed or running produces nothing. */
  readonly overlap?: 'skip' | 'allow';
  /** Ticks that passed while nothing ran: `skip` (default) fires none, `once` the latest, `{ max }` the latest `max`. */
  readonly missed?: MissedPolicy;
  /** No tick before this time (ms since the epoch, or a Date). */
  readonly startAt?: number | Date;
  /** No tick after this time (ms since the epoch, or a Date). */
  readonly endAt?: number | Date;
}

/** A spec as stored: checked, dates as ms, defaults filled in (its JSON is what replicas compare). */
export interface StoredSpec {
  readonly pattern: string;
  readonly cron?: string;
  readonly everyMs?: number;
  readonly tz?: string;
  readonly payload?: unknown;
  readonly clientId: string;
  readonly overlap: 'skip' | 'allow';
  readonly missed: MissedPolicy;
  readonly startAt?: number;
  readonly endAt?: number;
}

/** The client id of a schedule's tasks when its spec names none. */
export const SCHEDULE_CLIENT_ID = 'schedules';
/** A tick fired this late is still on time (a restart, a failover, a slow check): past it, `missed` decides. */
export const SCHEDULE_GRACE_MS = 10_000;
/** Most ticks a late check enumerates for one schedule (a rhythm of 100 ms down for a long time). */
const MAX_TICKS = 1_000;
const ID = /^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$/;

/** Checks a schedule's id and spec; the stored form, or InvalidScheduleError naming the field. */
export function checkSchedule(id: unknown, spec: ScheduleSpec | undefined): StoredSpec {
  const fail = (message: string): never => {
    throw new InvalidScheduleError(typeof id === 'string' && ID.test(id) ? id : undefined, message);
  };
  if (typeof id !== 'string' || !ID.test(id)) {
    fail('the schedule id must be 1-128 characters of letters, digits and . _ : @ - (starting with a letter or digit)');
  }
  if (typeof spec !== 'object' || spec === null) return fail('the spec must be an object');
  if (typeof spec.pattern !== 'string' || spec.pattern.length === 0) fail('"pattern" must be a non-empty string');
  if ((spec.cron === undefined) === (spec.everyMs === undefined)) fail('give exactly one of "cron" and "everyMs"');
  if (spec.everyMs !== undefined && (!Number.isSafeInteger(spec.everyMs) || spec.everyMs < 100)) {
    fail(`"everyMs" must be an integer of at least 100, got ${String(spec.everyMs)}`);
  }
  if (spec.tz !== undefined && spec.cron === undefined) fail('"tz" applies to "cron" only');
  if (spec.tz !== undefined && !validZone(spec.tz)) fail(`"tz" must be an IANA time zone, got "${String(spec.tz)}"`);
  if (spec.cron !== undefined) cronOf(spec.cron, spec.tz, fail);
  if (spec.clientId !== undefined && (typeof spec.clientId !== 'string' || !/^[^{}\s]{1,128}$/.test(spec.clientId))) {
    fail('"clientId" must be 1-128 characters without spaces or braces');
  }
  if (spec.overlap !== undefined && spec.overlap !== 'skip' && spec.overlap !== 'allow') {
    fail(`"overlap" must be 'skip' or 'allow'`);
  }
  const missed = spec.missed ?? 'skip';
  if (
    missed !== 'skip' &&
    missed !== 'once' &&
    !(typeof missed === 'object' && Number.isSafeInteger(missed.max) && missed.max >= 1 && missed.max <= 100)
  ) {
    fail(`"missed" must be 'skip', 'once' or { max: 1..100 }`);
  }
  const startAt = timeOf(spec.startAt, 'startAt', fail);
  const endAt = timeOf(spec.endAt, 'endAt', fail);
  if (startAt !== undefined && endAt !== undefined && endAt <= startAt) fail('"endAt" must be after "startAt"');
  let payload: unknown;
  try {
    payload = spec.payload === undefined ? undefined : (JSON.parse(JSON.stringify(spec.payload)) as unknown);
  } catch {
    fail('"payload" must be JSON-serializable');
  }
  // Field by field, in a fixed order: replicas storing the same spec produce the same JSON.
  return {
    pattern: spec.pattern,
    cron: spec.cron,
    everyMs: spec.everyMs,
    tz: spec.tz,
    payload,
    clientId: spec.clientId ?? SCHEDULE_CLIENT_ID,
    overlap: spec.overlap ?? 'skip',
    missed: typeof missed === 'object' ? { max: missed.max } : missed,
    startAt,
    endAt,
  };
}

/** The first tick strictly after `after` (ms), or undefined when there is none (past `endAt`). */
export function nextTick(spec: StoredSpec, after: number, anchor: number): number | undefined {
  return tickClock(spec, anchor)(after);
}

/**
 * A schedule's ticks as a function: the first tick strictly after `after`. `anchor` is when the spec was
 * stored: an `everyMs` rhythm without `startAt` counts from it.
 */
export function tickClock(spec: StoredSpec, anchor: number): (after: number) => number | undefined {
  const cron = spec.cron === undefined ? undefined : cronOf(spec.cron, spec.tz);
  const every = spec.everyMs;
  return (after) => {
    const from = spec.startAt !== undefined && spec.startAt - 1 > after ? spec.startAt - 1 : after;
    let next: number | undefined;
    if (every !== undefined) {
      const origin = spec.startAt ?? anchor;
      next = from < origin ? origin : origin + (Math.floor((from - origin) / every) + 1) * every;
    } else {
      next = cron?.nextRun(new Date(from))?.getTime();
    }
    return next !== undefined && (spec.endAt === undefined || next <= spec.endAt) ? next : undefined;
  };
}

/** The next `count` ticks after `after`. */
export function nextTicks(spec: StoredSpec, after: number, anchor: number, count: number): number[] {
  const clock = tickClock(spec, anchor);
  const ticks: number[] = [];
  for (let at = clock(after); at !== undefined && ticks.length < count; at = clock(at)) ticks.push(at);
  return ticks;
}

/** What a check does with a schedule whose tick `due` has come, at Redis time `now`. */
export interface TickPlan {
  /** The ticks to fire now, oldest first (each one task, keyed by its time). */
  readonly fire: readonly number[];
  /** Ticks passed over by the `missed` policy. */
  readonly missed: number;
  /** The tick the schedule waits for next (undefined: none is left, past `endAt`). */
  readonly next: number | undefined;
}

/**
 * The ticks a working deployment saw while they were on time (see `ticksToFire`): those due from the grace
 * before the start of the run of takes under way (`start`; takes of due work with no gap longer than the
 * grace between them) up to the previous take (`last`). Both 0: this take starts a run.
 */
export interface SeenTicks {
  readonly start: number;
  readonly last: number;
}

/**
 * Ticks from `due` up to `now`: those within SCHEDULE_GRACE_MS of `now` are on time and all fire (a
 * restart or a slow check delays them, never drops them), and so do older ones that a working deployment
 * saw while they were on time (`seen`: they waited for busy processes, they were not missed); the rest
 * passed while no process was taking work, and `missed` picks: `skip` none, `once` the latest, `{ max }`
 * the latest `max`.
 */
export function ticksToFire(
  spec: StoredSpec,
  due: number,
  now: number,
  anchor: number,
  seen: SeenTicks = { start: 0, last: 0 },
): TickPlan {
  const clock = tickClock(spec, anchor);
  const ticks: number[] = [];
  let at: number | undefined = due;
  while (at !== undefined && at <= now && ticks.length < MAX_TICKS) {
    ticks.push(at);
    at = clock(at);
  }
  // Enumeration stopped at MAX_TICKS: the rest of the gap is missed too; the next tick is the first after now.
  const next = at !== undefined && at <= now ? clock(now) : at;
  const wasSeen = (tick: number) => seen.last > 0 && tick <= seen.last && tick >= seen.start - SCHEDULE_GRACE_MS;
  const onTime = ticks.filter((tick) => now - tick <= SCHEDULE_GRACE_MS || wasSeen(tick));
  const late = ticks.length - onTime.length;
  const keep = spec.missed === 'skip' ? 0 : spec.missed === 'once' ? 1 : spec.missed.max;
  const fromMissed = keep === 0 || late === 0 ? [] : ticks.slice(Math.max(0, late - keep), late);
  return { fire: [...fromMissed, ...onTime], missed: late - fromMissed.length, next };
}

/** The typical gap between ticks around `at` (what a tick's records are kept for). */
export function tickGap(spec: StoredSpec, at: number, anchor: number): number {
  if (spec.everyMs !== undefined) return spec.everyMs;
  const next = nextTick(spec, at, anchor);
  return next === undefined ? 60_000 : Math.max(1_000, next - at);
}

/** Most parsed cron expressions kept (building one costs ~30 µs; a firing process reads each many times). */
const CRON_CACHE_SIZE = 1_000;
// table-ok: bounded to CRON_CACHE_SIZE, the oldest entry leaving first
const parsedCrons = new Map<string, Cron>();

function cronOf(expression: string, tz: string | undefined, fail?: (message: string) => never): Cron {
  const key = `${tz ?? ''} ${expression}`;
  const known = parsedCrons.get(key);
  if (known) return known;
  let cron: Cron;
  try {
    // Paused: the library only computes times here; firing is the schedules' own (from Redis time).
    cron = new Cron(expression, { timezone: tz, paused: true, mode: '5-or-6-parts' });
  } catch (error) {
    if (!fail) throw error;
    return fail(`"cron" is not a cron expression (${error instanceof Error ? error.message : String(error)})`);
  }
  if (parsedCrons.size >= CRON_CACHE_SIZE) parsedCrons.delete(parsedCrons.keys().next().value as string);
  parsedCrons.set(key, cron);
  return cron;
}

function validZone(tz: unknown): boolean {
  if (typeof tz !== 'string') return false;
  try {
    new Intl.DateTimeFormat('en', { timeZone: tz });
    return true;
  } catch {
    return false;
  }
}

function timeOf(value: unknown, name: string, fail: (message: string) => never): number | undefined {
  if (value === undefined) return undefined;
  const ms = value instanceof Date ? value.getTime() : value;
  if (typeof ms !== 'number' || !Number.isSafeInteger(ms) || ms < 0) {
    return fail(`"${name}" must be a Date or ms since the epoch`);
  }
  return ms;
}

/** A schedule as stored (see changeSchedule-4.lua): its spec, version and flags. */
export interface ScheduleRecord {
  readonly version: string;
  /** Paused by an operator (`pauseSchedule`). */
  readonly paused: boolean;
  /** Registered by a `@TaskSchedule` decorator that is no longer in the code of a worker that runs its pattern. */
  readonly orphaned: boolean;
  /** Redis time (ms) the spec was stored at: an `everyMs` rhythm without `startAt` counts from it. */
  readonly anchor: number;
  /** `code`: a `@TaskSchedule` decorator; `api`: `upsertSchedule`. */
  readonly source: 'api' | 'code';
  readonly spec: StoredSpec;
}

/** The stored string of a schedule, or undefined when it is not one (a stray value). */
export function parseScheduleRecord(stored: string): ScheduleRecord | undefined {
  const match = /^(\d+)\|([a-z]*)\|(\d+)\|(api|code)\|(.*)$/s.exec(stored);
  if (!match) return undefined;
  try {
    const spec = JSON.parse(match[5]) as StoredSpec;
    if (typeof spec !== 'object' || spec === null || typeof spec.pattern !== 'string') return undefined;
    return {
      version: match[1],
      paused: match[2].includes('p'),
      orphaned: match[2].includes('o'),
      anchor: Number(match[3]),
      source: match[4] as 'api' | 'code',
      spec,
    };
  } catch {
    return undefined;
  }
}

/** What a schedule's ticks did, as stored with it (written by the process that moved it on). */
export interface ScheduleState {
  /** The last tick handled (fired, skipped, missed or held), Redis time in ms. */
  readonly lastTick?: number;
  /** What it did. */
  readonly lastOutcome?: 'fired' | 'skipped' | 'missed' | 'held';
  /** The task the last fired tick produced. */
  readonly lastTaskId?: string;
  /** When that tick fired (Redis time, ms). */
  readonly lastFiredAt?: number;
  /** Ticks that produced a task, since the schedule was stored. */
  readonly fired: number;
  /** Ticks that produced nothing because the previous task was still pending, delayed or running (`overlap: 'skip'`). */
  readonly skipped: number;
  /** Ticks passed over while no process was running (`missed`). */
  readonly missed: number;
  /**
   * Ticks that produced nothing because the pattern's shard count was not on record yet (no worker or producer
   * had used the pattern: a schedule never decides how many shards a pattern has). Absent in states stored
   * before it existed.
   */
  readonly held?: number;
  /** While its ticks are held: why, in words (cleared by the next fired or skipped tick). */
  readonly heldReason?: string;
}

export function parseScheduleState(stored: string | null): ScheduleState {
  const empty: ScheduleState = { fired: 0, skipped: 0, missed: 0, held: 0 };
  if (stored === null) return empty;
  try {
    const state = JSON.parse(stored) as { -readonly [field in keyof ScheduleState]: ScheduleState[field] };
    if (typeof state !== 'object' || state === null || typeof state.fired !== 'number') return empty;
    // A state stored before `held` existed counts none.
    state.held ??= 0;
    return state;
  } catch {
    return empty;
  }
}

/** The id of a tick's task: the schedule's id and the tick's time, so the task says which tick it is. */
export function tickTaskId(scheduleId: string, tick: number): string {
  return `${scheduleId}@${new Date(tick).toISOString()}`;
}
