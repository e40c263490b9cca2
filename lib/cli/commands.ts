import { DEAD_LETTER_REASONS } from '../core/model/dead-letter.js';
import { selects, type DeadLetterFilter, type DeadLetterSelection, type TaskAdmin } from '../core/admin/admin.js';
import type { DeadLetterReason, DeadLetterRecord } from '../core/model/dead-letter.js';
import { duration, table } from './format.js';
import { schedules } from './schedule-commands.js';
import { task } from './task-commands.js';
import { batch } from './batch-commands.js';
import { flow } from './flow-commands.js';

export const EXIT = { ok: 0, redis: 1, usage: 2, unknownQueue: 3, notFound: 4 } as const;

/** A failure the CLI reports in one line with its own exit code. */
export class CliError extends Error {
  constructor(
    readonly exitCode: number,
    message: string,
  ) {
    super(message);
  }
}

export const USAGE = `Usage: nestjs-redis-tasks <command> [options]

Commands:
  stats [pattern]                     every pattern's depth, or one pattern in detail
  workers [pattern]                   registered workers, their leases and tasks in flight
  dead list <pattern>                 dead letters, newest first (--limit, default 20; --offset)
  dead show <pattern> <id>            one dead letter in full
  dead requeue <pattern> <id>...|--all|<filter>  run dead letters again (attempts reset)
  dead purge <pattern> <id>...|--all|<filter>    delete dead letters
    filters (combined): --reason ${DEAD_LETTER_REASONS.join('|')}, --client <id>,
    --error <text in the message>, --older-than <ms>; they also narrow dead list
  groups <pattern>                    consumer groups registered on the pattern
  groups remove <pattern> <group>     unregister a group and delete its copies (stop its workers first)
  pause <pattern>                     workers stop claiming (producers still enqueue)
  resume <pattern>                    workers claim again
  schedules [list]                    recurring schedules: rhythm, state, next 3 ticks, last tick and its task
  schedules pause|resume <id>         stop a schedule's ticks, or tick again from the next one
  schedules trigger <id>              one task now, outside the rhythm
  schedules remove <id>               delete a schedule
  task show <pattern> <id>            a tracked task: where it is (waiting, running where, since when, its
                                      progress) or how it ended
  task cancel <pattern> <id>          cancel a tracked task wherever it is (--reason <text>)
  batch show <id>                     a batch: its tasks' counts (pending, succeeded, failed, cancelled) and
                                      its callback
  batch cancel <id>                   cancel a batch: its waiting tasks removed, its running ones stopped
  flow show <id>                      a flow: its state and each node's (waiting, released, succeeded, failed,
                                      cancelled, skipped) with its parents and its result or error
  flow cancel <id>                    cancel a flow: nothing more released, its running nodes stopped
                                      (--reason <text>)

Options:
  --url <redis://...>   Redis to use (default: $REDIS_URL, else redis://127.0.0.1:6379)
  --prefix <prefix>     key prefix of the application (default: tasks)
  --group <group>       the consumer group whose copies to read or change (default: default)
  --json                machine-readable output
  -h, --help            this text

Exit codes: 0 done, 1 Redis unreachable or failed, 2 bad usage, 3 unknown pattern, 4 no such dead letter,
schedule, tracked task, batch or flow.`;

export interface CliOptions {
  readonly json: boolean;
  readonly all: boolean;
  readonly limit?: string;
  readonly offset?: string;
  readonly reason?: string;
  readonly client?: string;
  readonly error?: string;
  readonly 'older-than'?: string;
}

const REASONS = DEAD_LETTER_REASONS;

/** The dead-letter filter the options name, if any. */
function filterOf(options: CliOptions): DeadLetterFilter | undefined {
  const { reason, client, error } = options;
  if (reason === undefined && client === undefined && error === undefined && options['older-than'] === undefined)
    return undefined;
  if (reason !== undefined && !(REASONS as readonly string[]).includes(reason)) {
    throw usage(`--reason must be one of ${REASONS.join(', ')}, got "${reason}"`);
  }
  return {
    reason: reason as DeadLetterReason | undefined,
    clientId: client,
    error,
    olderThanMs: options['older-than'] === undefined ? undefined : count('older-than', options['older-than'], 0),
  };
}

function usage(message: string): CliError {
  return new CliError(EXIT.usage, `${message} (see --help)`);
}

function count(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!/^\d+$/.test(value)) throw usage(`--${name} must be a non-negative integer, got "${value}"`);
  return Number(value);
}

async function knownQueue(admin: TaskAdmin, pattern: string | undefined): Promise<string> {
  if (!pattern) throw usage('a pattern is needed');
  if (!(await admin.exists(pattern))) {
    const known = await admin.queues();
    throw new CliError(
      EXIT.unknownQueue,
      `unknown pattern "${pattern}" (known: ${known.length > 0 ? known.join(', ') : 'none'}; is --prefix right?)`,
    );
  }
  return pattern;
}

function ids(rest: readonly string[], options: CliOptions, verb: string): DeadLetterSelection {
  const filter = filterOf(options);
  if ([options.all, rest.length > 0, filter !== undefined].filter(Boolean).length > 1) {
    throw usage(`dead ${verb} takes ids, --all or filters: one of them`);
  }
  if (options.all) return 'all';
  if (filter) return { filter };
  if (rest.length === 0) throw usage(`dead ${verb} needs task ids, --all, or filters`);
  return { ids: [...rest] };
}

const json = (value: unknown) => JSON.stringify(value, null, 2);

type Command = (admin: TaskAdmin, args: readonly string[], options: CliOptions) => Promise<string>;

/** Every command, by name: each checks its own arguments. */
const COMMANDS: Readonly<Record<string, Command>> = {
  stats: (admin, args, options) =>
    args.length > 1
      ? Promise.reject(usage('stats takes at most one pattern'))
      : args[0]
        ? patternStats(admin, args[0], options)
        : allStats(admin, options),
  workers,
  dead: (admin, args, options) => dead(admin, args, options, json),
  groups,
  pause: (admin, args, options) => pauseOrResume('pause', admin, args, options),
  resume: (admin, args, options) => pauseOrResume('resume', admin, args, options),
  schedules: (admin, args, options) =>
    schedules(admin, args, options, { usage, notFound: (message) => new CliError(EXIT.notFound, message) }),
  task: (admin, args, options) =>
    task(admin, args, options, { usage, notFound: (message) => new CliError(EXIT.notFound, message) }),
  batch: (admin, args, options) =>
    batch(admin, args, options, { usage, notFound: (message) => new CliError(EXIT.notFound, message) }),
  flow: (admin, args, options) =>
    flow(admin, args, options, { usage, notFound: (message) => new CliError(EXIT.notFound, message) }),
};

/** Runs one command; resolves with what to print. */
export async function run(admin: TaskAdmin, positionals: readonly string[], options: CliOptions): Promise<string> {
  const [command, ...rest] = positionals;
  const handler = Object.hasOwn(COMMANDS, command) ? COMMANDS[command] : undefined;
  if (!handler) throw usage(`unknown command "${command}"`);
  return handler(admin, rest, options);
}

async function patternStats(admin: TaskAdmin, pattern: string, options: CliOptions): Promise<string> {
  const stats = await admin.stats(await knownQueue(admin, pattern));
  if (options.json) return json(stats);
  const clients = Object.entries(stats.pending.byClient);
  const { counters } = stats;
  return [
    `pattern ${stats.queue}: ${stats.state}, ${stats.shards} shard(s), ${stats.workers.alive} live worker(s) of ${stats.workers.registered} registered` +
      (stats.consumed ? '' : '; NEVER CONSUMED: no worker ever registered for it (a misspelt pattern?)'),
    table(
      ['pending', 'in flight', 'delayed', 'dead', 'oldest pending', 'completed', 'failed', 'retried', 'dead-lettered'],
      [
        [
          stats.pending.total,
          stats.inFlight.total,
          stats.delayed,
          stats.deadLetters,
          duration(stats.oldestPendingAgeMs),
          counters.completed,
          counters.failed,
          counters.retried,
          counters.deadLettered,
        ],
      ],
    ),
    '',
    clients.length > 0
      ? table(['client', 'pending'], clients.slice(0, 20)) +
        (clients.length > 20 ? `\n… and ${clients.length - 20} more clients` : '')
      : 'no pending tasks',
    '',
    Object.keys(stats.inFlight.byWorker).length > 0
      ? table(['worker', 'in flight'], Object.entries(stats.inFlight.byWorker))
      : 'nothing in flight',
    ...(stats.faults.length > 0
      ? [
          '',
          `${stats.faults.length} fault(s) in Redis data:`,
          table(
            ['key', 'found'],
            stats.faults.map((fault) => [fault.subject, fault.detail]),
          ),
        ]
      : []),
  ].join('\n');
}

async function allStats(admin: TaskAdmin, options: CliOptions): Promise<string> {
  const all = await Promise.all((await admin.queues()).map((queue) => admin.stats(queue)));
  if (options.json) return json(all);
  if (all.length === 0) return 'no patterns under this prefix have had a worker yet';
  return table(
    ['pattern', 'pending', 'in flight', 'delayed', 'dead', 'oldest pending', 'clients', 'state'],
    all.map((s) => [
      s.queue,
      s.pending.total,
      s.inFlight.total,
      s.delayed,
      s.deadLetters,
      duration(s.oldestPendingAgeMs),
      Object.keys(s.pending.byClient).length,
      `${s.consumed ? s.state : 'never consumed'}${s.faults.length > 0 ? `, ${s.faults.length} fault(s)` : ''}`,
    ]),
  );
}

async function workers(admin: TaskAdmin, args: readonly string[], options: CliOptions): Promise<string> {
  if (args.length > 1) throw usage('workers takes at most one pattern');
  const found = await admin.workers(args[0] ? await knownQueue(admin, args[0]) : undefined);
  if (options.json) return json(found);
  if (found.length === 0) return 'no workers registered';
  const now = Date.now();
  return table(
    ['pattern', 'worker', 'state', 'last heartbeat', 'lease', 'in flight'],
    found.map((w) => [
      w.queue,
      w.workerId,
      w.alive ? 'alive' : 'LEASE EXPIRED',
      w.lastHeartbeatAt === null ? '-' : `${duration(Math.max(0, now - w.lastHeartbeatAt))} ago`,
      w.alive ? `expires in ${duration(w.leaseExpiresAt - now)}` : `expired ${duration(now - w.leaseExpiresAt)} ago`,
      w.inFlight,
    ]),
  );
}

async function groups(admin: TaskAdmin, args: readonly string[], options: CliOptions): Promise<string> {
  if (args[0] === 'remove') {
    if (args.length !== 3) throw usage('groups remove takes a pattern and a group');
    const pattern = await knownQueue(admin, args[1]);
    const removed = await admin.removeGroup(pattern, args[2]);
    if (options.json) return json(removed);
    return `removed group ${args[2]} from ${pattern}: ${removed.pending} pending, ${removed.delayed} delayed, ${removed.inFlight} in flight and ${removed.deadLetters} dead-lettered copies deleted`;
  }
  if (args.length !== 1) throw usage('groups takes one pattern');
  const found = await admin.groups(await knownQueue(admin, args[0]));
  return options.json
    ? json(found)
    : found.length > 0
      ? found.join('\n')
      : 'no groups registered (workers of the implicit group register "default")';
}

async function pauseOrResume(
  command: 'pause' | 'resume',
  admin: TaskAdmin,
  args: readonly string[],
  options: CliOptions,
): Promise<string> {
  if (args.length !== 1) throw usage(`${command} takes one pattern`);
  const pattern = await knownQueue(admin, args[0]);
  await (command === 'pause' ? admin.pause(pattern) : admin.resume(pattern));
  return options.json
    ? json({ pattern, paused: command === 'pause' })
    : `${pattern}: ${command === 'pause' ? 'paused' : 'resumed'}`;
}

async function dead(
  admin: TaskAdmin,
  args: readonly string[],
  options: CliOptions,
  json: (value: unknown) => string,
): Promise<string> {
  const [verb, pattern, ...rest] = args;
  if (!verb || !['list', 'show', 'requeue', 'purge'].includes(verb)) {
    throw usage(
      verb
        ? `unknown dead-letter command "${verb}" (list, show, requeue, purge)`
        : 'dead needs list, show, requeue or purge',
    );
  }
  const queue = await knownQueue(admin, pattern);
  switch (verb) {
    case 'list':
      return deadList(admin, queue, rest, options, json);
    case 'show': {
      if (rest.length !== 1) throw usage('dead show takes one task id');
      const record = (await admin.listDeadLetters(queue, { limit: Number.MAX_SAFE_INTEGER })).find(
        (r) => r.id === rest[0],
      );
      if (!record) throw new CliError(EXIT.notFound, `no dead letter with id "${rest[0]}" in ${queue}`);
      return json(record);
    }
    case 'requeue': {
      const selection = ids(rest, options, 'requeue');
      const result = await admin.requeueDeadLetters(queue, selection);
      if (selection !== 'all' && 'ids' in selection && result.requeued + result.skipped === 0)
        noneOf(queue, selection.ids);
      if (options.json) return json(result);
      return `requeued ${result.requeued} dead letter(s) of ${queue}${result.skipped > 0 ? `; skipped ${result.skipped} that cannot run (malformed)` : ''}`;
    }
    default: {
      const selection = ids(rest, options, 'purge');
      const removed = await admin.purgeDeadLetters(queue, selection);
      if (selection !== 'all' && 'ids' in selection && removed === 0) noneOf(queue, selection.ids);
      return options.json ? json({ purged: removed }) : `purged ${removed} dead letter(s) of ${queue}`;
    }
  }
}

/** No dead letter of `queue` had any of `given` ids. */
function noneOf(queue: string, given: readonly string[]): never {
  throw new CliError(EXIT.notFound, `no dead letter with id ${given.map((id) => `"${id}"`).join(', ')} in ${queue}`);
}

/** `dead list <pattern>`: a page of dead letters, newest first (filtered by --reason, --client... when given). */
async function deadList(
  admin: TaskAdmin,
  queue: string,
  rest: readonly string[],
  options: CliOptions,
  json: (value: unknown) => string,
): Promise<string> {
  if (rest.length > 0) throw usage('dead list takes one pattern');
  const filter = filterOf(options);
  const offset = count('offset', options.offset, 0);
  const limit = count('limit', options.limit, 20);
  const records = filter
    ? (await admin.listDeadLetters(queue, { limit: Number.MAX_SAFE_INTEGER }))
        .filter((r) => selects({ filter }, r))
        .slice(offset, offset + limit)
    : await admin.listDeadLetters(queue, { offset, limit });
  if (options.json) return json(records);
  const total = await admin.countDeadLetters(queue);
  if (records.length === 0) return `no dead letters in ${queue} (${total} in all)`;
  return (
    `${total} dead letter(s) in ${queue}, newest first\n` +
    table(
      ['id', 'client', 'reason', 'attempts', 'died', 'error'],
      records.map((r) => [
        r.id ?? '?',
        r.clientId ?? '?',
        r.reason,
        r.attempts,
        new Date(r.deadAt).toISOString(),
        oneLine(r),
      ]),
    )
  );
}

function oneLine(record: DeadLetterRecord): string {
  const text = record.error ? `${record.error.name}: ${record.error.message}` : (record.detail ?? '');
  return text.length > 60 ? `${text.slice(0, 59)}…` : text;
}
