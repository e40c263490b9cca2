import { randomBytes } from 'node:crypto';
import { COALESCE_MODE_CODES, encodeNewEntry } from '../model/codec.js';
import type { CoalesceOptions, CoalesceSettings } from '../model/coalesce.js';
import { describe } from '../support/describe.js';
import type { BackoffOptions } from '../model/retry-policy.js';
import { MAX_DELAY_MS, nameProblem, taskRules, validateBackoff, validateMaxAttempts } from '../config/rules.js';
import { InvalidTaskError, PayloadTooLargeError } from '../model/errors.js';
import type { TraceContext } from '../support/tracing.js';
import type { PreparedTask } from '../model/prepared-task.js';
import { coalesceSettings, trackProblem, trackTimes } from '../config/rules.js';
import { mayBeTracked, traitConflict } from '../model/task-traits.js';
import type { TrackOptions } from '../model/task-status.js';
import type { FlowParentResult } from '../model/flow.js';

export type { PreparedTask };

/** Per-task settings a record may carry (the record builder's options, less what it resolves itself). */
export interface TaskOptions {
  /** Runs allowed in all for this task (overrides the pattern's and the transport's). */
  readonly maxAttempts?: number;
  /** Retry backoff for this task (overrides the pattern's and the transport's). */
  readonly backoff?: BackoffOptions;
  /** Higher runs first within its client (0, the default, after every higher one: the plain FIFO list). */
  readonly priority?: number;
  /** Claimable no earlier than this many ms after the enqueue (Redis clock). */
  readonly delayMs?: number;
  /** Claimable no earlier than this time (ms since the epoch); turned into a delay at enqueue. */
  readonly runAt?: number;
  /** Not run after this time (ms since the epoch): dead letters, reason `expired`. */
  readonly expiresAt?: number;
  /** A second live task with this key is refused as a duplicate. */
  readonly deduplicationKey?: string;
  /** Longest time the deduplication key holds (ms), if the task never completes; default: the client's `deduplicationTtlMs`. */
  readonly deduplicationTtlMs?: number;
  /**
   * Keep the deduplication key for its whole TTL even after the task succeeded (a second emit within the TTL
   * is refused whatever became of the first); it is still freed when the task ends in dead letters or is
   * cancelled. Default false: freed as soon as the task succeeds.
   */
  readonly deduplicationKeepAfterSuccess?: boolean;
  /** Track this task (status by id, cancel, progress kept): true, false or `{ keepMs, liveMs }`; default: the client's `track`. */
  readonly track?: boolean | TrackOptions;
  /** Latest wins: emits with the same key combine (see `RedisTaskRecordBuilder.setCoalesceKey`). */
  readonly coalesce?: CoalesceOptions & { readonly key: string };
}

/** One task to enqueue. */
export interface EnqueueItem extends TaskOptions {
  readonly payload: unknown;
  readonly clientId: string;
  /** Reply channel of a `send()` caller. */
  readonly replyTo?: string;
  /** Task id; generated when absent. */
  readonly id?: string;
  /** The producer span's trace context (OpenTelemetry), stored with the task. */
  readonly trace?: TraceContext;
  /** A `send()` caller listens for the handler's progress values (published on `replyTo`). */
  readonly wantsProgress?: boolean;
  /** The batch the task belongs to (counted there once it settles); its id must be given too. */
  readonly batch?: string;
  /** The flow the task is a node of (released by its flow; its id must be given too), its node id and its parents' outcomes. */
  readonly flow?: string;
  readonly node?: string;
  readonly parents?: Readonly<Record<string, FlowParentResult>>;
  /** A node whose success may release its children in its own settle (the envelope's `fold`). */
  readonly fold?: boolean;
}

/** What a task is checked against besides its own fields. */
export interface ItemLimits {
  readonly maxPayloadBytes: number;
  /** Default TTL of deduplication keys (ms). */
  readonly deduplicationTtlMs: number;
  /** Whether tasks are tracked unless they say otherwise (the client's `track`). */
  readonly track?: boolean | TrackOptions;
  /** A payload over this many bytes (JSON) is stored out of line (see `outOfLineBytes`); false: never. */
  readonly outOfLineBytes?: number | false;
}

/**
 * Task ids: a random per-process part (72 bits, base64url) and a counter, so they are unique across
 * processes without asking Redis, cheap to make, and short on the wire (14 to 20 characters).
 */
const ID_NONCE = taskIdNonce(randomBytes(9));

/**
 * The per-process part of task ids, from random bytes (base64url). It never starts with '-' or '_':
 * an id passed to the CLI (`dead show <id>`) that starts with '-' is read as an option, so one process
 * in 32 made ids the CLI could not take.
 */
export function taskIdNonce(bytes: Uint8Array): string {
  const nonce = Buffer.from(bytes).toString('base64url');
  return nonce[0] === '-' || nonce[0] === '_' ? `t${nonce.slice(1)}` : nonce;
}
let idCount = 0;

export function newTaskId(): string {
  return ID_NONCE + (idCount++).toString(36);
}

/**
 * Checks one item and encodes it; throws `InvalidTaskError` (or `PayloadTooLargeError`) naming the
 * problem, and its index when it is part of a batch. The same rules for every item, whatever built it
 * (a builder, a hand-made record, a plain payload).
 */
export function prepareTask(
  item: EnqueueItem,
  now: number,
  index: number | undefined,
  limits: ItemLimits,
): PreparedTask {
  const fail = (message: string): never => {
    throw new InvalidTaskError(
      index === undefined ? message : `item ${index}: ${message} (nothing of the batch was enqueued)`,
      index,
    );
  };
  const id = item.id ?? newTaskId();
  const clientProblem = nameProblem(item.clientId);
  if (clientProblem) {
    fail(`the client id ${clientProblem}, got ${describe(item.clientId)}`);
  }
  const payload = serializePayload(item.payload, index, limits.maxPayloadBytes);
  // A plain task (the common case) has nothing more to check.
  if (!isPlain(item, limits) || outOfLine(item, payload, limits))
    return prepareWithOptions(item, id, payload, now, limits, fail);
  const entry = encodeNewEntry(
    { id, clientId: item.clientId, enqueuedAt: now, replyTo: item.replyTo, ...item.trace },
    payload,
  );
  return {
    id,
    clientId: item.clientId,
    entry,
    priority: 0,
    delayMs: 0,
    deduplicationTtlMs: limits.deduplicationTtlMs,
    awaitsReply: item.replyTo !== undefined,
  };
}

/**
 * Whether the payload goes out of line (a plain SET by the producer, a plain GET by the worker: it never
 * crosses into the scripts; see scripts/include/body.lua): over `outOfLineBytes`, unless the task has a
 * coalescing key (a newer emit replaces its entry inside the script: its payload stays in the entry).
 */
function outOfLine(item: EnqueueItem, payload: string, limits: ItemLimits): boolean {
  const over = limits.outOfLineBytes;
  if (over === false || over === undefined || item.coalesce !== undefined) return false;
  // Each UTF-16 unit is at most 3 UTF-8 bytes: most payloads are measured without counting.
  return payload.length > over || (payload.length * 3 > over && Buffer.byteLength(payload) > over);
}

/** A task with no option but its payload, client, id and reply channel (and no client-wide tracking). */
function isPlain(item: EnqueueItem, limits: ItemLimits): boolean {
  return (
    !limits.track &&
    item.track === undefined &&
    item.wantsProgress === undefined &&
    item.maxAttempts === undefined &&
    item.backoff === undefined &&
    item.priority === undefined &&
    item.delayMs === undefined &&
    item.runAt === undefined &&
    item.expiresAt === undefined &&
    item.deduplicationKey === undefined &&
    item.deduplicationKeepAfterSuccess === undefined &&
    item.coalesce === undefined &&
    item.batch === undefined &&
    item.flow === undefined
  );
}

/** A task with options: each checked (problems through `fail`), its traits' conflicts refused, then encoded. */
function prepareWithOptions(
  item: EnqueueItem,
  id: string,
  payload: string,
  now: number,
  limits: ItemLimits,
  fail: (message: string) => never,
): PreparedTask {
  const coalesce = item.coalesce === undefined ? undefined : coalesceOf(item, fail);
  const conflict = traitConflict(item);
  if (conflict) fail(conflict);
  if ((item.batch !== undefined || item.flow !== undefined) && item.id === undefined)
    fail('a task of a batch or a flow needs its id given (its batch counts it, its flow releases it once)');
  const { priority, delayMs, dedupTtlMs } = checkOptions(item, now, limits, fail);
  if (item.track !== undefined && trackProblem(item.track)) fail(`track ${trackProblem(item.track)}`);
  // A task whose traits conflict with tracking (a coalesced one: its id may be replaced before it runs; a
  // batch's: the batch tells where its tasks are) is not tracked: the client's `track` passes it by.
  const track = mayBeTracked(item) ? trackTimes(item.track ?? limits.track) : undefined;
  const body = outOfLine(item, payload, limits) ? { id: newTaskId(), json: payload } : undefined;
  const entry = encodeNewEntry(
    {
      id,
      clientId: item.clientId,
      enqueuedAt: now,
      replyTo: item.replyTo,
      maxAttempts: item.maxAttempts,
      backoff: item.backoff,
      priority,
      expiresAt: item.expiresAt,
      dedupKey: item.deduplicationKey, // the stored envelope's field name (wire format)
      dedupKeep: item.deduplicationKey !== undefined && item.deduplicationKeepAfterSuccess ? 1 : undefined,
      ...item.trace,
      track: track ? 1 : undefined,
      progress: item.wantsProgress ? 1 : undefined,
      coalesce: coalesce?.key,
      coalesceMode: coalesce && COALESCE_MODE_CODES[coalesce.mode],
      batch: item.batch,
      flow: item.flow,
      node: item.node,
      fold: item.fold ? 1 : undefined,
      parents: item.parents,
      body: body?.id,
    },
    payload,
  );
  return {
    id,
    clientId: item.clientId,
    entry,
    priority,
    delayMs: coalesce?.mode === 'debounce' ? coalesce.delayMs : delayMs,
    coalesce,
    deduplicationKey: item.deduplicationKey,
    deduplicationTtlMs: dedupTtlMs,
    awaitsReply: item.replyTo !== undefined,
    track,
    replyTo: item.replyTo,
    body,
  };
}

/** A coalesced task's settings (the options it cannot have beside them are traits' conflicts). */
function coalesceOf(item: EnqueueItem, fail: (message: string) => never): CoalesceSettings {
  const raw: unknown = item.coalesce;
  if (typeof raw !== 'object' || raw === null) return fail(`coalesce must be { key, mode?, delayMs?, maxWaitMs? }`);
  const { key, ...options } = raw as { key?: unknown };
  const settings = coalesceSettings(key, options, fail);
  if (settings.mode === 'debounce' && (item.delayMs !== undefined || item.runAt !== undefined)) {
    fail('a debounced task takes its delay from setCoalesceKey({ delayMs }), not setDelay() or setRunAt()');
  }
  return settings;
}

/** The options of a task that has some, checked (each problem through `fail`), with the delay resolved. */
function checkOptions(
  item: EnqueueItem,
  now: number,
  limits: ItemLimits,
  fail: (message: string) => never,
): { priority: number; delayMs: number; dedupTtlMs: number } {
  try {
    if (item.maxAttempts !== undefined)
      validateMaxAttempts('maxAttempts', item.maxAttempts, (field, message) => new Error(`${field} ${message}`));
    if (item.backoff !== undefined)
      validateBackoff('backoff', item.backoff, (field, message) => new Error(`${field} ${message}`));
  } catch (error) {
    fail((error as Error).message);
  }
  if (item.wantsProgress && item.replyTo === undefined) fail('onProgress needs send(): emit() has no caller to tell');
  const must = (what: string, value: unknown, rule: (value: unknown) => string | undefined): void => {
    const expected = rule(value);
    if (expected) fail(`${what} must be ${expected}, got ${describe(value)}`);
  };
  const priority = item.priority ?? 0;
  must('priority', priority, taskRules.priority);
  let delayMs = item.delayMs ?? 0;
  must('delay', delayMs, taskRules.delay);
  if (item.runAt !== undefined) {
    must('runAt', item.runAt, taskRules.time);
    delayMs = Math.max(delayMs, item.runAt - now);
  }
  delayMs = Math.ceil(delayMs);
  if (delayMs > MAX_DELAY_MS) {
    fail(
      `the task would be due in ${Math.round(delayMs / 86_400_000)} days; the longest delay is ${MAX_DELAY_MS / 86_400_000} days`,
    );
  }
  if (item.expiresAt !== undefined) {
    must('expiresAt', item.expiresAt, taskRules.time);
    if (item.expiresAt <= now) {
      fail(
        `the task expired before it was enqueued (expiresAt ${new Date(item.expiresAt).toISOString()} is in the past)`,
      );
    }
    if (item.expiresAt <= now + delayMs) {
      fail('the task would expire before its delay ends');
    }
  }
  const dedupTtlMs = item.deduplicationTtlMs ?? limits.deduplicationTtlMs;
  if (item.deduplicationKeepAfterSuccess !== undefined && typeof item.deduplicationKeepAfterSuccess !== 'boolean') {
    fail(`deduplicationKeepAfterSuccess must be true or false, got ${describe(item.deduplicationKeepAfterSuccess)}`);
  }
  if (item.deduplicationKeepAfterSuccess && item.deduplicationKey === undefined) {
    fail('deduplicationKeepAfterSuccess needs a deduplication key');
  }
  if (item.deduplicationKey !== undefined) {
    must('the deduplication key', item.deduplicationKey, taskRules.deduplicationKey);
    must('the deduplication TTL', dedupTtlMs, taskRules.deduplicationTtl);
  }
  return { priority, delayMs, dedupTtlMs };
}

function serializePayload(payload: unknown, index: number | undefined, maxPayloadBytes: number): string {
  const where = index === undefined ? 'the payload' : `item ${index}'s payload`;
  let json: string | undefined;
  try {
    json = JSON.stringify(payload === undefined ? null : payload);
  } catch (error) {
    throw new InvalidTaskError(`${where} cannot be serialized to JSON: ${(error as Error).message}`, index);
  }
  if (json === undefined) {
    throw new InvalidTaskError(`${where} cannot be serialized to JSON (got a ${typeof payload})`, index);
  }
  // Each UTF-16 unit is at most 3 UTF-8 bytes: most payloads are measured without counting.
  if (json.length * 3 > maxPayloadBytes) {
    const bytes = Buffer.byteLength(json);
    if (bytes > maxPayloadBytes) {
      throw new PayloadTooLargeError(bytes, maxPayloadBytes, index);
    }
  }
  return json;
}
