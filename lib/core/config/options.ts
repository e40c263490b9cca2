import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { InvalidOptionError } from '../model/errors.js';
import { trackProblem } from './rules.js';
import type { TrackOptions } from '../model/task-status.js';
import { MAX_SHARDS } from '../redis/keys.js';
import { describeServer, type RedisTaskConnection } from '../redis/connection.js';
import type { EvictionPolicyCheck } from '../redis/guardrails.js';
import { describe } from '../support/describe.js';
import { redactUrl } from '../support/redact.js';
export type { RedisTaskConnection };
/** The connection a `connection` option opens (or is): an ioredis `Redis` or `Cluster`. */
export type { RedisConnection } from '../redis/scripts.js';
/** The consumer group of a worker that names none (the pattern's own keys). */
export { DEFAULT_GROUP } from '../redis/keys.js';
import {
  validateBackoff,
  validateClientConcurrency,
  validateGroup,
  validateHandlerTimeout,
  validateMaxAttempts,
  validateName,
  validatePatternConcurrency,
  validateRate,
  validateWeight,
} from './rules.js';
import { DEFAULT_RETRY_POLICY, defaultJitter, type BackoffOptions } from '../model/retry-policy.js';

export interface RedisTaskCommonOptions {
  /** Default `redis://127.0.0.1:6379`. */
  connection?: RedisTaskConnection;
  /** Key prefix shared by the producers and workers of one application. Default `tasks`. */
  prefix?: string;
  /**
   * What to do at start-up when Redis's `maxmemory-policy` is not `noeviction` (an evicting Redis can
   * drop queued tasks): `warn` (default), `refuse` to start, or `off`.
   */
  evictionPolicy?: EvictionPolicyCheck;
  /**
   * Spread each queue over this many hash tags (shards), so the nodes of a Redis Cluster share one
   * queue's load; a client's tasks all live in one shard. Producers and workers of a queue must agree:
   * a process configured with another count than the queue was first used with is refused. Default 1.
   */
  shards?: number;
  /**
   * OpenTelemetry tracing, when `@opentelemetry/api` is installed (an optional peer; without it nothing is
   * loaded): `emit`/`send`/`emitBatch` make a PRODUCER span and store its W3C trace context with the task,
   * and each run of a handler is a CONSUMER span, child of it. Default true.
   */
  tracing?: boolean;
}

/** Wait for replicas to confirm each enqueue (Redis `WAIT`). */
export interface DurabilityOptions {
  /** Replicas that must confirm the write. */
  replicas: number;
  /** How long to wait for them before failing with `ReplicationTimeoutError`. */
  timeoutMs: number;
}

export interface RedisTaskClientOptions extends RedisTaskCommonOptions {
  /** Client id of the tasks this client emits, unless a record overrides it. Default `default`. */
  clientId?: string;
  /** Largest serialized payload `emit`/`send` accept, in bytes. Default 1 MiB. */
  maxPayloadBytes?: number;
  /** How long `send()` waits for the handler's result before failing; 0 waits forever. Default 30 s. */
  replyTimeoutMs?: number;
  /** Items per round trip in `emitBatch`; each chunk is all or nothing. Default 1,000. */
  batchChunkSize?: number;
  /**
   * Longest time a deduplication key holds, in case its task never completes or dies (a key is freed
   * as soon as its task is acknowledged or dead-lettered). Default 24 h.
   */
  deduplicationTtlMs?: number;
  /**
   * When set, `emit`/`emitBatch` resolve only once this many replicas confirmed the tasks (`WAIT`, in
   * the same round trip as the enqueue), and fail with `ReplicationTimeoutError` otherwise. Default: off
   * (resolve once the primary accepted them).
   */
  durability?: DurabilityOptions;
  /**
   * Longest wait of `emit`/`send`/`emitBatch` for Redis to take their tasks (ms). Past it they fail with
   * `RedisUnavailableError`, naming the pattern and server and saying whether anything was written.
   * Default 5,000.
   */
  enqueueTimeoutMs?: number;
  /**
   * When a `send()` times out, remove its task if no worker has started it (the error then says
   * `cancelled: true`), instead of leaving it to run later with nobody waiting. Default false.
   */
  cancelOnReplyTimeout?: boolean;
  /**
   * Track every task this client enqueues: an index per task, with a TTL, that lets `getTask` tell where it
   * is, `cancel` stop it wherever it is (running ones too) and keeps its progress. `true` for the defaults
   * (kept 1 h after the task ended, at most 7 days while it waits or runs), or `{ keepMs, liveMs }`. A
   * record's `setTracked()` decides for one task. Default false: nothing is kept per task.
   */
  track?: boolean | TrackOptions;
  /**
   * A payload larger than this (bytes of its JSON) is stored out of line: a plain SET beside the task, read
   * with a plain GET by the worker that claims it, deleted when the task ends; the task's entry only names
   * it, so large payloads never pass through the queue's scripts (each 16 KB passing costs Redis about
   * 20 µs). Needs workers of this release or later (an earlier one dead-letters such a task: no payload).
   * `false` keeps every payload in its task's entry. A task with a coalescing key always keeps its payload
   * in its entry. Default 8,192.
   */
  outOfLineBytes?: number | false;
}

export interface RedisTaskTransportOptions extends RedisTaskCommonOptions {
  /** Handlers running at once in this worker, across all its patterns. Default 10. */
  concurrency?: number;
  /**
   * Most tasks claimed in one round trip (never more than the free handler slots). Default: half the
   * concurrency, so two overlapping calls keep every slot busy. 1 claims one task at a time.
   */
  prefetch?: number;
  /**
   * Stable worker id: a worker restarted with the same id first resumes what its own processing
   * lists hold. Must be unique among running workers. Default: host, pid and a random suffix.
   */
  workerId?: string;
  /** How often the worker renews its lease (on its own timer). Default 5 s. */
  heartbeatIntervalMs?: number;
  /**
   * How long a worker's lease lasts without renewal. Its tasks are recovered (returned to the head of
   * their lists, attempt counted) once it expires: the worker died, or its event loop was blocked for
   * longer than this. A handler that blocks the loop for less keeps its tasks. Default 30 s.
   */
  leaseMs?: number;
  /** Runs a task may have in all (first included) before it goes to dead letters. Default 3. */
  maxAttempts?: number;
  /** Delay before a failed task's next attempt. Default exponential from 1 s, jitter 0.5, max 1 h. */
  backoff?: BackoffOptions;
  /**
   * The built-in reaper (recovers dead workers' tasks, promotes due retries): its interval in ms, or
   * false to leave it to a RedisTaskReaper elsewhere. Default 1,000.
   */
  reaperIntervalMs?: number | false;
  /** How long `close()` waits for running handlers before requeueing their tasks. Default 10 s. */
  shutdownTimeoutMs?: number;
  /** Dead letters kept per queue; the oldest are dropped beyond it. Default 10,000. */
  deadLetterCap?: number;
  /** How long a `send()` result stays in Redis for a caller that missed the live reply. Default 60 s. */
  resultTtlMs?: number;
  /**
   * Largest `send()` result (its JSON, bytes) stored and published. A larger one completes its task (the work
   * is done) and its caller gets `ResultTooLargeError`. Default 1 MiB, as `maxPayloadBytes`.
   */
  maxResultBytes?: number;
  /**
   * The backstop against a wake message lost to a reconnection: an idle claim loop claims anyway after this
   * times the number of the process's loops waiting (so an idle process claims on its own about once per
   * this, whatever its number of patterns); and longest a paused queue's loop waits before it looks again.
   * Default 5 s.
   */
  blockTimeoutMs?: number;
  /**
   * Most of this worker's handler slots (`concurrency`) each named pattern may hold at once, e.g.
   * `{ 'video.encode': 2 }`; or per handler with the extra `@EventPattern('video.encode', { concurrency: 2 })`
   * (the extra wins). Each from 1 to `concurrency`. A pattern named nowhere has no cap of its own; fairness
   * holds whatever the caps: a slot is kept for idle patterns (`idleSlots`), and a slot freed goes first to a
   * waiting pattern below its fair share. Default: none.
   */
  patternConcurrency?: Record<string, number>;
  /**
   * Handler slots a worker with several patterns keeps free for its idle ones while one pattern holds its share
   * of all (`concurrency` ÷ patterns): an idle pattern's next task then starts at once instead of after one run
   * of another pattern's flood (however long). 0 to let one pattern fill every slot. Default 1 from
   * `concurrency: 4` up, else 0 (a reserve of one in two or three slots would halve a flood).
   */
  idleSlots?: number;
  /**
   * Most tasks of one client in flight at once, across all workers of a pattern; 0 for no cap. 1 runs
   * each client's tasks one at a time, in order, while other clients proceed. Overridable per pattern
   * with handler extras (`@EventPattern('p', { clientConcurrency: 1 })`). All workers of a pattern must
   * agree on it. Default 0.
   */
  clientConcurrency?: number;
  /**
   * The watchdog: when Redis leaves a claim or heartbeat command unanswered this long past its due
   * time (a half-open connection, a failover that left a socket hanging), the worker cuts that
   * connection and reconnects; a claim loop that stopped is restarted. Default 15 s.
   */
  watchdogTimeoutMs?: number;
  /**
   * Claim weights of clients on every pattern of this worker, written at start-up: a client of weight 3
   * gets three tasks for every one of a client of weight 1 while both have work. Also settable at run
   * time with `RedisTaskAdmin.setClientWeight`. Default: none (every client weighs 1).
   */
  clientWeights?: Record<string, number>;
  /**
   * Most tasks of one client started per second on each pattern of this worker (a token bucket with a
   * burst of a tenth of a second); 0 for no limit. Per pattern with handler extras
   * (`@EventPattern('p', { clientRateLimit: 50 })`), per client with `RedisTaskAdmin.setClientRateLimit`.
   * A limited client's tasks wait in Redis without holding back other clients. Default: no limit.
   */
  clientRateLimit?: number;
  /**
   * The consumer group of this worker. Every group consuming a pattern gets its own copy of each task
   * emitted after the group first registered (its own lists, retries and dead letters); workers of one
   * group compete for its copies. Default `default`, the implicit group (the pattern's own keys).
   */
  group?: string;
  /**
   * Longest run of a handler, in ms; 0 for none. A run past it has its `ctx.signal` aborted with a
   * `HandlerTimeoutError`, frees its slot, and counts as a failed attempt (retried, or dead-lettered with
   * reason `timeout`). Per pattern with handler extras (`@EventPattern('p', { handlerTimeoutMs: 30_000 })`).
   * Default 0.
   */
  handlerTimeoutMs?: number;
  /**
   * Durable steps: a run past this many ms gives its task back at its next step boundary (`ctx.step` throws
   * `TaskYieldedError`): the task waits again behind newer tasks, its finished steps kept, no attempt counted,
   * and its next run goes on from the next step; 0 for none. Per pattern with handler extras
   * (`@EventPattern('p', { maxRuntimeMs: 600_000 })`). Default 0.
   */
  maxRuntimeMs?: number;
  /**
   * Durable steps: the runs each `ctx.step` has of its own before its failure counts as a failed attempt of the
   * task (a step's `{ attempts }` overrides it). 1 (the default) counts every failure against `maxAttempts`;
   * more makes attempts count per step, so a task of many steps with rare failures is not ended by their sum.
   * Per pattern with handler extras (`@EventPattern('p', { stepAttempts: 3 })`).
   */
  stepAttempts?: number;
  /**
   * A run going on this long is logged as slow, once. If the worker shuts down before such a run ends,
   * the interruption counts as an attempt, so a task that hangs every run ends in dead letters (reason
   * `interrupted`) instead of coming back after every restart; shorter runs return uncounted. Default 60 s.
   */
  slowRunMs?: number;
  /**
   * How long `listen()` waits for Redis to answer at start-up (a worker started before Redis, as in
   * docker-compose or Kubernetes), status `reconnecting` meanwhile; 0 waits as long as it takes. Past
   * it, `listen()` fails with `RedisUnavailableError` naming the server. Default 0.
   */
  startupTimeoutMs?: number;
  /**
   * Whether a `send()` caller whose task failed also gets the head of the handler's stack
   * (`TaskFailedError.remoteStack`). Dead letters always keep it. Default false: a stack tells a caller
   * about the worker's code and paths.
   */
  sendErrorStack?: boolean;
  /**
   * Longest wait between two checks for due recurring schedules (ms), or false for a worker that fires
   * none (another process does). Every process may fire ticks; each tick still makes one task. A worker
   * sleeps until the earliest tick on record and is woken when a schedule is stored or resumed, so this is
   * only the backstop for an announcement it missed. Default 60,000.
   */
  scheduleCheckMs?: number | false;
}

export type ResolvedClientOptions = Required<Omit<RedisTaskClientOptions, 'connection' | 'durability'>> & {
  connection: RedisTaskConnection;
  durability?: DurabilityOptions;
};
export type ResolvedTransportOptions = Required<Omit<RedisTaskTransportOptions, 'connection' | 'backoff'>> & {
  connection: RedisTaskConnection;
  backoff: Required<BackoffOptions>;
};

export const DEFAULT_CONNECTION = 'redis://127.0.0.1:6379';

const COMMON_DEFAULTS = {
  connection: DEFAULT_CONNECTION,
  prefix: 'tasks',
  evictionPolicy: 'warn' as EvictionPolicyCheck,
  shards: 1,
  tracing: true,
};

const CLIENT_DEFAULTS: ResolvedClientOptions = {
  ...COMMON_DEFAULTS,
  clientId: 'default',
  maxPayloadBytes: 1024 * 1024,
  replyTimeoutMs: 30_000,
  batchChunkSize: 1_000,
  deduplicationTtlMs: 86_400_000,
  enqueueTimeoutMs: 5_000,
  cancelOnReplyTimeout: false,
  track: false,
  outOfLineBytes: 8_192,
};

/** What a task is checked against where no client's options apply (the admin API's and a worker's schedules). */
export const DEFAULT_TASK_LIMITS = {
  maxPayloadBytes: CLIENT_DEFAULTS.maxPayloadBytes,
  deduplicationTtlMs: CLIENT_DEFAULTS.deduplicationTtlMs,
} as const;

const TRANSPORT_DEFAULTS: Omit<ResolvedTransportOptions, 'workerId' | 'prefetch' | 'idleSlots'> = {
  ...COMMON_DEFAULTS,
  concurrency: 10,
  heartbeatIntervalMs: 5_000,
  leaseMs: 30_000,
  maxAttempts: DEFAULT_RETRY_POLICY.maxAttempts,
  backoff: DEFAULT_RETRY_POLICY.backoff,
  reaperIntervalMs: 1_000,
  shutdownTimeoutMs: 10_000,
  deadLetterCap: 10_000,
  resultTtlMs: 60_000,
  maxResultBytes: CLIENT_DEFAULTS.maxPayloadBytes,
  blockTimeoutMs: 5_000,
  clientConcurrency: 0,
  patternConcurrency: {},
  watchdogTimeoutMs: 15_000,
  clientWeights: {},
  clientRateLimit: 0,
  group: 'default',
  handlerTimeoutMs: 0,
  maxRuntimeMs: 0,
  stepAttempts: 1,
  slowRunMs: 60_000,
  startupTimeoutMs: 0,
  sendErrorStack: false,
  scheduleCheckMs: 60_000,
};

type Check = (name: string, value: unknown) => void;

const integer =
  (min: number, max = Number.MAX_SAFE_INTEGER): Check =>
  (name, value) => {
    if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
      throw new InvalidOptionError(name, `must be an integer from ${min} to ${max}, got ${describe(value)}`);
    }
  };

const boolean: Check = (option, value) => {
  if (typeof value !== 'boolean') throw new InvalidOptionError(option, `must be true or false, got ${describe(value)}`);
};

/** Names used inside keys: no braces (they would break the hash tag), no control characters (rules). */
const name: Check = (option, value) => validateName(option, value);

const connection: Check = (option, value) => {
  if (typeof value === 'string') {
    let url: URL | undefined;
    try {
      url = new URL(value);
    } catch {
      url = undefined;
    }
    if (!url || (url.protocol !== 'redis:' && url.protocol !== 'rediss:')) {
      throw new InvalidOptionError(
        option,
        `must be a redis:// or rediss:// URL, got ${JSON.stringify(redactUrl(value))}`,
      );
    }
    return;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new InvalidOptionError(
      option,
      `must be a redis:// URL, ioredis options, { nodes } for a cluster, or an ioredis instance, got ${describe(value)}`,
    );
  }
  if ('nodes' in value && !Array.isArray((value as { nodes: unknown }).nodes)) {
    throw new InvalidOptionError(`${option}.nodes`, 'must be an array of cluster nodes');
  }
};

const evictionPolicy: Check = (option, value) => {
  if (value !== 'warn' && value !== 'refuse' && value !== 'off') {
    throw new InvalidOptionError(option, `must be "warn", "refuse" or "off", got ${describe(value)}`);
  }
};

const durability: Check = (option, value) => {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new InvalidOptionError(option, `must be { replicas, timeoutMs }, got ${describe(value)}`);
  }
  const given = value as Record<string, unknown>;
  for (const key of Object.keys(given)) {
    if (key !== 'replicas' && key !== 'timeoutMs') {
      throw new InvalidOptionError(`${option}.${key}`, 'is not a known durability option (known: replicas, timeoutMs)');
    }
  }
  integer(1, 1_000)(`${option}.replicas`, given.replicas);
  integer(1, 3_600_000)(`${option}.timeoutMs`, given.timeoutMs);
};

const COMMON_CHECKS: Record<string, Check> = {
  connection,
  prefix: name,
  evictionPolicy,
  shards: integer(1, MAX_SHARDS),
  tracing: (option, value) => boolean(option, value),
};

const CLIENT_CHECKS: Record<string, Check> = {
  ...COMMON_CHECKS,
  clientId: name,
  maxPayloadBytes: integer(1, 512 * 1024 * 1024),
  replyTimeoutMs: integer(0),
  batchChunkSize: integer(1, 10_000),
  deduplicationTtlMs: integer(1),
  durability,
  enqueueTimeoutMs: integer(10, 3_600_000),
  cancelOnReplyTimeout: (option, value) => boolean(option, value),
  outOfLineBytes: (option, value) => {
    if (value !== false) integer(1, 512 * 1024 * 1024)(option, value);
  },
  track: (option, value) => {
    const problem = trackProblem(value);
    if (problem) throw new InvalidOptionError(option, problem);
  },
};

const TRANSPORT_CHECKS: Record<string, Check> = {
  ...COMMON_CHECKS,
  concurrency: integer(1, 10_000),
  prefetch: integer(1, 1_000),
  workerId: name,
  heartbeatIntervalMs: integer(10, 3_600_000),
  leaseMs: integer(20, 86_400_000),
  maxAttempts: (option, value) => validateMaxAttempts(option, value),
  backoff: (option, value) => validateBackoff(option, value),
  reaperIntervalMs: (option, value) => {
    if (value !== false) integer(10, 3_600_000)(option, value);
  },
  shutdownTimeoutMs: integer(0),
  deadLetterCap: integer(1),
  resultTtlMs: integer(1),
  maxResultBytes: integer(1, 512 * 1024 * 1024),
  blockTimeoutMs: integer(10, 300_000),
  clientConcurrency: (option, value) => validateClientConcurrency(option, value),
  watchdogTimeoutMs: integer(100, 3_600_000),
  clientRateLimit: (option, value) => validateRate(option, value),
  group: (option, value) => validateGroup(option, value),
  handlerTimeoutMs: (option, value) => validateHandlerTimeout(option, value),
  maxRuntimeMs: (option, value) => validateHandlerTimeout(option, value),
  stepAttempts: (option, value) => validateMaxAttempts(option, value),
  slowRunMs: integer(100, 86_400_000),
  startupTimeoutMs: integer(0, 86_400_000),
  sendErrorStack: (option, value) => boolean(option, value),
  scheduleCheckMs: (option, value) => {
    if (value !== false) integer(50, 60_000)(option, value);
  },
  idleSlots: integer(0, 10_000),
  patternConcurrency: (option, value) => {
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      throw new InvalidOptionError(option, `must be an object of pattern -> concurrency, got ${describe(value)}`);
    }
  },
  clientWeights: (option, value) => {
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      throw new InvalidOptionError(option, `must be an object of client id -> weight, got ${describe(value)}`);
    }
    for (const [clientId, weight] of Object.entries(value)) {
      validateName(`${option}.${clientId}`, clientId);
      validateWeight(`${option}.${clientId}`, weight);
    }
  },
};

function validate(options: unknown, checks: Record<string, Check>, what: string): Record<string, unknown> {
  if (options === undefined || options === null) {
    return {};
  }
  if (typeof options !== 'object' || Array.isArray(options)) {
    throw new InvalidOptionError(what, `must be an object, got ${describe(options)}`);
  }
  const given = options as Record<string, unknown>;
  for (const [key, value] of Object.entries(given)) {
    const check = checks[key];
    if (key === 'serializer' || key === 'deserializer') {
      // Nest's own transports take these; here they would be silently meaningless, so they are refused.
      throw new InvalidOptionError(
        key,
        "is not supported: a task is stored in this library's own format, which its Lua scripts read and every worker decodes; " +
          'send a payload that is already what you want stored (a string, or any JSON value)',
      );
    }
    if (!check) {
      throw new InvalidOptionError(key, `is not a known ${what} option (known: ${Object.keys(checks).join(', ')})`);
    }
    if (value !== undefined) {
      check(key, value);
    }
  }
  return Object.fromEntries(Object.entries(given).filter(([, value]) => value !== undefined));
}

/**
 * One rule for where Redis is, everywhere (transport, client, CLI, testing helper): the `connection`
 * option, else the REDIS_URL environment variable, else redis://127.0.0.1:6379.
 */
export function defaultConnection(): string {
  const fromEnvironment = process.env.REDIS_URL;
  if (fromEnvironment) {
    connection('REDIS_URL (environment)', fromEnvironment);
    return fromEnvironment;
  }
  return DEFAULT_CONNECTION;
}

export function resolveClientOptions(options: unknown): ResolvedClientOptions {
  const given = validate(options, CLIENT_CHECKS, 'RedisTaskClient');
  return {
    ...CLIENT_DEFAULTS,
    connection: given.connection === undefined ? defaultConnection() : CLIENT_DEFAULTS.connection,
    ...given,
  };
}

export function resolveTransportOptions(options: unknown): ResolvedTransportOptions {
  const given = validate(options, TRANSPORT_CHECKS, 'RedisTaskTransport');
  const resolved = {
    ...TRANSPORT_DEFAULTS,
    workerId: defaultWorkerId(),
    ...(given.connection === undefined ? { connection: defaultConnection() } : {}),
    ...given,
  } as ResolvedTransportOptions;
  // Half the slots per call: two calls overlap, one refilling slots while the other's reply travels.
  resolved.prefetch ??= Math.min(Math.ceil(resolved.concurrency / 2), 1_000);
  resolved.idleSlots ??= resolved.concurrency >= 4 ? 1 : 0;
  if (resolved.idleSlots >= resolved.concurrency) {
    throw new InvalidOptionError(
      'idleSlots',
      `must be less than concurrency (${resolved.concurrency}), got ${resolved.idleSlots}: no slot would be left to run a pattern`,
    );
  }
  if (given.backoff) {
    const backoff = given.backoff as BackoffOptions;
    resolved.backoff = {
      ...DEFAULT_RETRY_POLICY.backoff,
      ...backoff,
      jitter: backoff.jitter ?? defaultJitter(backoff.type),
    };
  }
  for (const [pattern, cap] of Object.entries(resolved.patternConcurrency)) {
    validatePatternConcurrency(`patternConcurrency["${pattern}"]`, cap, resolved.concurrency);
  }
  if (resolved.heartbeatIntervalMs * 2 > resolved.leaseMs) {
    throw new InvalidOptionError(
      'heartbeatIntervalMs',
      `must be at most half of leaseMs (${resolved.leaseMs}), got ${resolved.heartbeatIntervalMs}: a lease must outlive a missed heartbeat`,
    );
  }
  return resolved;
}

/** Shortest hold of a queue's recovery lock (ms). */
const REAPER_LOCK_MIN_MS = 1_000;

/**
 * What a reaper works with: a transport's own settings, or, for a standalone RedisTaskReaper, the
 * transport defaults (one source for both). Its recovery lock outlives a heartbeat interval.
 */
export function reaperSettings(
  // A standalone reaper knows no heartbeat interval: it takes the shortest lock.
  from: Pick<ResolvedTransportOptions, 'heartbeatIntervalMs' | 'deadLetterCap' | 'resultTtlMs'> = {
    ...TRANSPORT_DEFAULTS,
    heartbeatIntervalMs: 0,
  },
): {
  lockMs: number;
  deadLetterCap: number;
  resultTtlMs: number;
} {
  return {
    lockMs: Math.max(REAPER_LOCK_MIN_MS, from.heartbeatIntervalMs),
    deadLetterCap: from.deadLetterCap,
    resultTtlMs: from.resultTtlMs,
  };
}

export function defaultWorkerId(): string {
  return `${hostname().replace(/[{}\s]/g, '-')}:${process.pid}:${randomBytes(4).toString('hex')}`;
}

/** Where a `connection` option points, as messages name it (host:port, Sentinel or Cluster nodes; never a password). */
export function describeConnection(connection: RedisTaskConnection): string {
  return describeServer(connection);
}
