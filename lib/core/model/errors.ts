import { retryDelayProblem, type HandlerRequest } from './retry-policy.js';

/**
 * One error class per concept, each with a stable `code`. Code that decides what to do with an error
 * checks `code` or the class, never the message text.
 */
const ERROR_CLASSES = Symbol.for('nestjs-redis-tasks.errorClasses');

export class RedisTaskError extends Error {
  /** The names of this error's classes, so another copy of the package (ESM next to CommonJS) knows it. */
  declare readonly [ERROR_CLASSES]: readonly string[];

  constructor(
    readonly code: string,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = new.target.name;
    const classes: string[] = [];
    for (let at: unknown = new.target; typeof at === 'function' && at !== Error; at = Object.getPrototypeOf(at)) {
      classes.push((at as { name: string }).name);
    }
    Object.defineProperty(this, ERROR_CLASSES, { value: classes, enumerable: false });
  }

  /**
   * `instanceof` works across copies of the package (an app whose ESM code and CommonJS tests load both
   * builds): an error of another copy is an instance when it carries this class's name among its classes.
   */
  static override [Symbol.hasInstance](value: unknown): boolean {
    if (Function.prototype[Symbol.hasInstance].call(this, value)) return true;
    const classes =
      typeof value === 'object' && value !== null ? (value as { [ERROR_CLASSES]?: unknown })[ERROR_CLASSES] : undefined;
    return Array.isArray(classes) && classes.includes(this.name);
  }
}

/** An option has the wrong type or value. Thrown at construction; the message names the option. */
export class InvalidOptionError extends RedisTaskError {
  constructor(
    readonly option: string,
    message: string,
  ) {
    super('INVALID_OPTION', `nestjs-redis-tasks: option "${option}" ${message}`);
  }
}

/** A task (payload or record settings) cannot be enqueued as given. Nothing was written to Redis. */
export class InvalidTaskError extends RedisTaskError {
  constructor(
    message: string,
    /** Position of the offending item in an `emitBatch` call. */
    readonly index?: number,
  ) {
    super('INVALID_TASK', `nestjs-redis-tasks: ${message}`);
  }
}

/** A schedule's id or spec cannot be stored as given (the message names the field). Nothing was written. */
export class InvalidScheduleError extends RedisTaskError {
  constructor(
    /** The schedule's id, when it is a valid one. */
    readonly scheduleId: string | undefined,
    message: string,
  ) {
    super(
      'INVALID_SCHEDULE',
      `nestjs-redis-tasks: schedule ${scheduleId === undefined ? '' : `"${scheduleId}" `}${message}`,
    );
  }
}

/** No schedule is stored under this id. */
export class ScheduleNotFoundError extends RedisTaskError {
  constructor(readonly scheduleId: string) {
    super('SCHEDULE_NOT_FOUND', `nestjs-redis-tasks: no schedule "${scheduleId}"`);
  }
}

/**
 * A schedule's pattern has no shard count on record yet (no worker or producer has used it under this
 * prefix): `triggerSchedule` writes nothing, for a schedule never decides how many shards a pattern has.
 * Start the pattern's workers (or emit to it once) first.
 */
export class ScheduleHeldError extends RedisTaskError {
  constructor(
    readonly scheduleId: string,
    readonly pattern: string,
  ) {
    super(
      'SCHEDULE_HELD',
      `nestjs-redis-tasks: schedule "${scheduleId}" cannot fire yet: no worker or producer has used pattern "${pattern}" under this prefix, so its shard count is not on record; start its workers (or emit to it once) first`,
    );
  }
}

/**
 * A batch id still in use by a batch that was sealed or cancelled: nothing can be added to it, and it cannot
 * be opened again until its keys expired (`keepMs` after its callbacks settled): `until` says when (absent
 * while its callbacks have not all settled). Use a new id (a date or a run number in it) to start another.
 */
export class BatchIdInUseError extends InvalidTaskError {
  /** When the id can be used again (absent: not known yet, its callbacks have not all settled). */
  readonly until?: Date;

  constructor(
    readonly batchId: string,
    readonly state: string,
    ttlMs: number,
  ) {
    const until = ttlMs > 0 ? new Date(Date.now() + ttlMs) : undefined;
    super(
      `batch "${batchId}" is ${state}: it cannot be opened again ${until ? `until its keys expire at ${until.toISOString()}` : 'until its callbacks have settled and its keepMs has passed'}; use another id for a new batch`,
    );
    Object.defineProperty(this, 'code', { value: 'BATCH_ID_IN_USE' });
    this.until = until;
  }
}

/**
 * A flow cannot be created as given: a cycle, a dependency on a node it does not have, two nodes with one id,
 * or a node's pattern, payload or options not valid (the message names the node; `node` holds its id when
 * one is at fault). Nothing was written.
 */
export class InvalidFlowError extends InvalidTaskError {
  constructor(
    message: string,
    /** The node at fault, when one is. */
    readonly node?: string,
  ) {
    super(`flow: ${message}`);
    Object.defineProperty(this, 'code', { value: 'INVALID_FLOW' });
  }
}

/** The serialized payload is larger than `maxPayloadBytes`. Nothing was written to Redis. */
export class PayloadTooLargeError extends RedisTaskError {
  constructor(
    readonly bytes: number,
    readonly limit: number,
    /** Position of the offending item in an `emitBatch` call. */
    readonly index?: number,
  ) {
    super(
      'PAYLOAD_TOO_LARGE',
      `nestjs-redis-tasks: ${index === undefined ? 'the task payload' : `item ${index}'s payload`} is ${bytes} bytes, over the maxPayloadBytes limit of ${limit}${index === undefined ? '' : ' (nothing of the batch was enqueued)'}`,
    );
  }
}

/**
 * A `send()` got no reply within its timeout. With `cancelOnReplyTimeout`, a task no worker had claimed
 * yet was removed (`cancelled: true`: it will not run); otherwise the task may still run later, with
 * nobody waiting for its result.
 */
export class ReplyTimeoutError extends RedisTaskError {
  constructor(
    readonly pattern: string,
    readonly timeoutMs: number,
    /** True when the task had not started and was removed, so it will not run. */
    readonly cancelled = false,
  ) {
    super(
      'REPLY_TIMEOUT',
      `nestjs-redis-tasks: no reply for "${pattern}" within ${timeoutMs} ms. ` +
        (cancelled
          ? 'No worker had started the task, and it was removed (cancelOnReplyTimeout): it will not run.'
          : `The task stays queued and may still run later, with nobody waiting for its result (cancelOnReplyTimeout removes it if no ` +
            `worker has started it). If no worker handles "${pattern}" on this prefix, or another worker on the same Redis and prefix ` +
            'took it (a dev server while tests run: give tests a prefix of their own, as createRedisTaskTestingApp does), nothing will answer'),
    );
  }
}

/**
 * `send()` of a task whose deduplication key a live task holds: the task was not enqueued, so no
 * reply will come. (`emit` reports a duplicate in its receipt instead.)
 */
export class DuplicateTaskError extends RedisTaskError {
  constructor(
    readonly pattern: string,
    /** The live task that holds the key. */
    readonly holderId: string,
  ) {
    super(
      'DUPLICATE',
      `nestjs-redis-tasks: a live task of "${pattern}" (${holderId}) holds this task's deduplication key; it was not enqueued`,
    );
  }
}

/** The client or transport was closed while an operation was under way. */
export class ClosedError extends RedisTaskError {
  constructor(what: string) {
    super('CLOSED', `nestjs-redis-tasks: ${what} is closed`);
  }
}

/**
 * Throw it from a handler to send the task to dead letters at once, without further attempts
 * (bad input that no retry can fix). Recognised by its `code`, so it works across package copies.
 */
export class NonRetryableTaskError extends RedisTaskError {
  constructor(message: string, options?: ErrorOptions) {
    super('NON_RETRYABLE', message, options);
  }
}

/**
 * Throw it from a handler to have the task run again later, after `delayMs` (default: the retry policy's
 * backoff) — the same as `ctx.retry({ delayMs })`. The run counts as an attempt: on the last one, the task
 * goes to dead letters instead. A `send()` caller goes on waiting for a later run's result.
 */
export class RetryTaskError extends RedisTaskError {
  readonly delayMs?: number;

  constructor(
    message = 'the handler asked for a retry',
    options?: { readonly delayMs?: number; readonly cause?: unknown },
  ) {
    super('RETRY_TASK', message, options?.cause === undefined ? undefined : { cause: options.cause });
    if (options?.delayMs !== undefined) {
      const problem = retryDelayProblem(options.delayMs);
      if (problem) throw new InvalidTaskError(`RetryTaskError's delayMs ${problem}`);
      this.delayMs = options.delayMs;
    }
  }
}

/**
 * Throw it from a handler to send the task to dead letters now with your reason (record reason
 * `rejected`, `detail` = the message) — the same as `ctx.deadLetter(reason)`. A `send()` caller gets a
 * `TaskFailedError` named `DeadLetterTaskError`.
 */
export class DeadLetterTaskError extends RedisTaskError {
  constructor(reason: string, options?: ErrorOptions) {
    super('DEAD_LETTER_TASK', reason, options);
  }
}

/**
 * `ctx.retry()`, `ctx.deadLetter()` or `ctx.extendLease()` of a run that no longer holds its task: its lease
 * was lost (another process recovered the task), the worker gave it up at shutdown, or the run is over.
 * Nothing was applied; the task is someone else's (or settled) now.
 */
export class LeaseLostError extends RedisTaskError {
  constructor(
    readonly pattern: string,
    readonly taskId: string,
    why: string,
  ) {
    super(
      'LEASE_LOST',
      `nestjs-redis-tasks: task ${taskId} of "${pattern}" is no longer held by this run (${why}); the request was refused`,
    );
  }
}

/**
 * The task was cancelled (`cancel()` of the client or the admin API): a `send()` caller's rejection, and
 * the reason a running handler's `ctx.signal` aborts with.
 */
export class TaskCancelledError extends RedisTaskError {
  constructor(
    readonly pattern: string,
    readonly taskId: string,
    /** The reason the canceller gave ('' none). */
    readonly reason = '',
  ) {
    super(
      'TASK_CANCELLED',
      `nestjs-redis-tasks: task ${taskId} of "${pattern}" was cancelled${reason === '' ? '' : `: ${reason}`}`,
    );
  }
}

/**
 * Latest wins: a newer task with the same coalescing key took this task's place. A `send()` caller whose
 * task was replaced while it waited (or superseded while it ran) gets this error; a superseded handler's
 * `ctx.signal` aborts with it.
 */
export class TaskReplacedError extends RedisTaskError {
  constructor(
    readonly pattern: string,
    readonly taskId: string,
    /** The id of the newer task that runs in its place. */
    readonly replacedBy: string,
  ) {
    super(
      'TASK_REPLACED',
      `nestjs-redis-tasks: task ${taskId} of "${pattern}" was replaced by task ${replacedBy} (same coalescing key)`,
    );
  }
}

/** What a thrown `RetryTaskError` / `DeadLetterTaskError` asks for (by code: works across package copies). */
export function requestOf(error: unknown): HandlerRequest | undefined {
  try {
    if (typeof error !== 'object' || error === null) return undefined;
    const { code, delayMs, message } = error as { code?: unknown; delayMs?: unknown; message?: unknown };
    if (code === 'RETRY_TASK')
      return { kind: 'retry', delayMs: retryDelayProblem(delayMs) === undefined ? (delayMs as number) : undefined };
    if (code === 'DEAD_LETTER_TASK')
      return {
        kind: 'dead-letter',
        detail: typeof message === 'string' ? message : 'the handler sent it to dead letters',
      };
    return undefined;
  } catch {
    return undefined; // a hostile Proxy: an ordinary failure
  }
}

/** True for a `NonRetryableTaskError` or an `UnserializableResultError`, or any error object carrying their code. */
export function isNonRetryable(error: unknown): boolean {
  try {
    const code = typeof error === 'object' && error !== null ? (error as { code?: unknown }).code : undefined;
    return code === 'NON_RETRYABLE' || code === 'UNSERIALIZABLE_RESULT' || code === 'STEP_TOO_LARGE';
  } catch {
    return false; // a thrown Proxy whose traps throw: an ordinary failure
  }
}

/**
 * A `@MessagePattern` handler returned a result that cannot be sent back as JSON (a BigInt, a circular
 * object). Its work is done, so the task completes (it is not retried or dead-lettered: requeueing it would
 * run its side effects again); the `send()` caller receives this error, which says where in the result the
 * value is (`result.total (a BigInt)`), never the value.
 */
export class UnserializableResultError extends RedisTaskError {
  constructor(
    readonly pattern: string,
    /** Where in the result, and why JSON refused it. */
    readonly reason: string,
    /** The task whose result it was (set on the caller's side). */
    readonly taskId?: string,
  ) {
    super(
      'UNSERIALIZABLE_RESULT',
      `nestjs-redis-tasks: the result of the "${pattern}" handler cannot be serialized to JSON (${reason})`,
    );
  }
}

/**
 * A `@MessagePattern` handler's result is larger than the worker's `maxResultBytes`: it is neither stored nor
 * published (a 20 MB reply would hold Redis and every subscriber up). The task completed (its work is done,
 * and is not run again); the `send()` caller receives this error.
 */
export class ResultTooLargeError extends RedisTaskError {
  constructor(
    readonly pattern: string,
    readonly taskId: string,
    readonly bytes: number,
    readonly limit: number,
  ) {
    super(
      'RESULT_TOO_LARGE',
      `nestjs-redis-tasks: the result of task ${taskId} of "${pattern}" is ${bytes} bytes, more than the worker's maxResultBytes (${limit}); the task completed, its result was not sent (store large results elsewhere and return a reference)`,
    );
  }
}

/**
 * A handler ran longer than its `handlerTimeoutMs`: its `ctx.signal` was aborted with this error, the
 * run counted as a failed attempt, and the task was retried or dead-lettered with reason `timeout`.
 */
export class HandlerTimeoutError extends RedisTaskError {
  constructor(
    readonly pattern: string,
    readonly timeoutMs: number,
  ) {
    super(
      'HANDLER_TIMEOUT',
      `nestjs-redis-tasks: the "${pattern}" handler did not finish within ${timeoutMs} ms (handlerTimeoutMs)`,
    );
  }
}

/**
 * A durable step's result or a checkpoint (`ctx.step`, `ctx.checkpoint`) is larger than a step may store
 * (its JSON, bytes): it is not stored, and the run fails without a retry (the same step would return the same
 * value again): the task goes to dead letters with this error. Store large data elsewhere and return a reference.
 */
export class StepTooLargeError extends RedisTaskError {
  constructor(
    readonly pattern: string,
    readonly taskId: string,
    /** The step's name, or `checkpoint`. */
    readonly step: string,
    readonly bytes: number,
    readonly limit: number,
  ) {
    super(
      'STEP_TOO_LARGE',
      `nestjs-redis-tasks: step "${step}" of task ${taskId} of "${pattern}" is ${bytes} bytes of JSON, more than a step may store (${limit}); nothing was stored (store large data elsewhere and return a reference)`,
    );
  }
}

/**
 * A run gave its task back at a step boundary (`ctx.step`) instead of starting another step: the worker is
 * shutting down, or the run passed its `maxRuntimeMs`. Thrown by `ctx.step` so the handler stops there; the task
 * waits again with its finished steps kept, no attempt counted, and its next run goes on from the next step.
 */
export class TaskYieldedError extends RedisTaskError {
  constructor(
    readonly pattern: string,
    readonly taskId: string,
    readonly why: 'shutdown' | 'maxRuntimeMs',
  ) {
    super(
      'TASK_YIELDED',
      `nestjs-redis-tasks: task ${taskId} of "${pattern}" gave itself back at a step boundary (${why === 'shutdown' ? 'the worker is shutting down' : 'its run passed maxRuntimeMs'}); its finished steps are kept and no attempt is counted`,
    );
  }
}

/**
 * A producer or worker is configured with a `shards` count other than the one the queue was first used
 * with. Refused, because a different count would look for tasks in other shards and leave some unseen.
 */
export class ShardCountMismatchError extends RedisTaskError {
  constructor(
    readonly queue: string,
    /** The count on record in Redis. */
    readonly recorded: number,
    /** The count this process is configured with. */
    readonly configured: number,
    /** The key holding the record (delete it only once every shard of the queue is empty). */
    readonly recordKey: string,
  ) {
    super(
      'SHARD_COUNT_MISMATCH',
      `nestjs-redis-tasks: queue "${queue}" is spread over ${recorded} shard(s), but this process is configured with shards: ${configured}. ` +
        `Another count would leave tasks in shards it does not look at. Use shards: ${recorded}, or drain the queue, stop its producers and workers, ` +
        `delete the key "${recordKey}" and start again with the new count.`,
    );
  }
}

/**
 * `emit`/`emitBatch` with `durability` set: Redis accepted the tasks, but fewer replicas than asked
 * confirmed them within the timeout. The tasks are enqueued (and may run), but a failover before the
 * replicas catch up could lose them: retry (with a deduplication key to stay idempotent) or alert.
 */
export class ReplicationTimeoutError extends RedisTaskError {
  constructor(
    readonly pattern: string,
    /** Replicas that confirmed. */
    readonly acknowledged: number,
    readonly required: number,
    readonly timeoutMs: number,
    /** Ids of the tasks written to the primary. */
    readonly taskIds: readonly string[],
  ) {
    super(
      'REPLICATION_TIMEOUT',
      `nestjs-redis-tasks: ${taskIds.length} task(s) of "${pattern}" were written to the primary, but only ${acknowledged} of ${required} replica(s) confirmed them within ${timeoutMs} ms`,
    );
  }
}

/**
 * Redis did not answer in time: `emit`/`send`/`emitBatch` gave up after `enqueueTimeoutMs`, or a
 * worker's start gave up after `startupTimeoutMs`. `written` says what is known of the task: `false`
 * when nothing was sent to Redis (safe to retry), `'unknown'` when the write was sent and its answer
 * never came (it may have been enqueued: retry with a deduplication key to stay idempotent).
 */
export class RedisUnavailableError extends RedisTaskError {
  constructor(
    /** The pattern of the tasks, or what was being started. */
    readonly pattern: string,
    /** The server, as host:port (never with credentials). */
    readonly server: string,
    readonly timeoutMs: number,
    readonly written: false | 'unknown',
    /** What the connection last reported (no command arguments). */
    readonly reason?: string,
    /**
     * Told at once, without waiting `timeoutMs`: the connection is known refused (nothing listens at the
     * address, or no such host), and it never was ready or has been down longer than `timeoutMs`.
     */
    readonly refused = false,
  ) {
    super(
      'REDIS_UNAVAILABLE',
      `nestjs-redis-tasks: Redis at ${server} ` +
        (refused ? 'refused the connection' : `did not answer within ${timeoutMs} ms`) +
        (pattern ? ` for "${pattern}"` : '') +
        (written === false ? '; nothing was written' : '; the write was sent, so the task may have been enqueued') +
        (reason ? ` (${reason})` : ''),
    );
  }
}

/**
 * Redis is full (`maxmemory` reached, policy `noeviction`) and refused the enqueue before writing anything
 * (`written: false`: retrying later is safe). Workers keep draining a full Redis (they may run then; see the
 * README's "A full Redis"): start or scale up the pattern's workers, raise `maxmemory`, or purge dead letters.
 */
export class RedisFullError extends RedisTaskError {
  readonly written = false as const;

  constructor(
    /** The pattern of the tasks. */
    readonly pattern: string,
    /** The server, as host:port (never with credentials). */
    readonly server: string,
  ) {
    super(
      'REDIS_FULL',
      `nestjs-redis-tasks: Redis at ${server} is full (maxmemory reached, maxmemory-policy noeviction)` +
        (pattern ? ` and refused the tasks of "${pattern}"` : '') +
        '; nothing was written. Start (or scale up) workers to drain the backlog, raise maxmemory, or purge dead letters',
    );
  }
}

/**
 * A worker started with the `workerId` of a worker that is still alive: its heartbeat went on advancing
 * while this one waited. Two processes with one id would take each other's running tasks for leftovers
 * of a previous run and run them again, so the second is refused. Give each process its own id (or
 * leave `workerId` unset: the generated one is unique per process).
 */
export class WorkerIdInUseError extends RedisTaskError {
  constructor(
    readonly workerId: string,
    /** The queue (pattern) where the live worker's heartbeat was seen. */
    readonly queue: string,
    /** How long this worker watched the heartbeat (ms). */
    readonly watchedMs: number,
  ) {
    super(
      'WORKER_ID_IN_USE',
      `nestjs-redis-tasks: worker id "${workerId}" belongs to a worker that is still alive (its heartbeat on "${queue}" advanced while this one ` +
        `watched it for ${watchedMs} ms). Two processes with one id would run each other's tasks twice: give each process its own workerId, ` +
        'or leave it unset for a generated one',
    );
  }
}

/**
 * `deletePrefix` found workers of the prefix alive (their leases run): deleting their keys under them
 * would lose their running tasks and leave them claiming from queues that no longer exist. Nothing was
 * deleted. Stop those workers first (a worker that died is no obstacle once its lease ran out).
 */
export class PrefixInUseError extends RedisTaskError {
  constructor(
    readonly prefix: string,
    /** The ids of the live workers found (each once). */
    readonly workers: readonly string[],
  ) {
    const named =
      workers
        .slice(0, 5)
        .map((id) => JSON.stringify(id))
        .join(', ') + (workers.length > 5 ? ` and ${workers.length - 5} more` : '');
    super(
      'PREFIX_IN_USE',
      `nestjs-redis-tasks: prefix "${prefix}" is in use by ${workers.length} live worker(s) (${named}); nothing was deleted. ` +
        'Stop its workers (app.close()) before deleting its keys',
    );
  }
}

/**
 * Redis refused a command for the ACL user (NOPERM): a configuration problem that no retry heals, so
 * it fails at once. The fix is the user's rule: `aclRule(prefix)` gives the least-privilege one.
 */
export class RedisPermissionError extends RedisTaskError {
  constructor(
    readonly prefix: string,
    /** Redis's own words (which command, or that a key is outside the user's patterns). */
    readonly reply: string,
    /** The command refused, when Redis (or the refused script's line) tells it. */
    readonly command?: string,
  ) {
    super(
      'REDIS_PERMISSION',
      `nestjs-redis-tasks: the Redis ACL user is not allowed what this library needs (${reply}${command ? `; command: ${command}` : ''}); ` +
        `give it the rule aclRule("${prefix}") (keys ~${prefix}:{* and ~${prefix}:queues, its channels and commands; see the README's least-privilege ACL)`,
    );
  }
}

/**
 * Redis cannot be used as configured, and no retry will change that: a refused password or ACL user,
 * an untrusted TLS certificate, a TLS port spoken to in plain text. Fails at once (start-up, emit)
 * instead of "retrying until Redis answers".
 */
export class RedisConfigurationError extends RedisTaskError {
  constructor(
    /** The server, as host:port (never with credentials). */
    readonly server: string,
    readonly reason: string,
  ) {
    super('REDIS_MISCONFIGURED', `nestjs-redis-tasks: cannot use Redis at ${server}: ${reason}`);
  }
}

/**
 * What a `send()` caller gets when the handler's task failed for good (its last attempt threw, it threw
 * a non-retryable error, or it was dead-lettered): the handler's error, with its type kept across the
 * transport. `name` and `message` are the handler error's own; `code` is its code (`TASK_FAILED` when
 * it had none); `data` is the `RpcException` payload (or the object an exception filter emitted);
 * `taskId`, `pattern` and `attempt` say which run failed, `reason` why the task ended in dead letters.
 * `remoteStack` is the handler's stack head, sent only when the worker's `sendErrorStack` is on.
 */
export class TaskFailedError extends RedisTaskError {
  readonly taskId: string;
  readonly pattern: string;
  readonly attempt: number;
  readonly reason: string;
  readonly data?: unknown;
  readonly remoteStack?: string;

  constructor(record: {
    name: string;
    message: string;
    code?: string;
    data?: unknown;
    stack?: string;
    taskId: string;
    pattern: string;
    attempt: number;
    reason: string;
  }) {
    super(record.code ?? 'TASK_FAILED', record.message);
    this.name = record.name;
    this.taskId = record.taskId;
    this.pattern = record.pattern;
    this.attempt = record.attempt;
    this.reason = record.reason;
    if (record.data !== undefined) this.data = record.data;
    if (record.stack !== undefined) this.remoteStack = record.stack;
  }
}
