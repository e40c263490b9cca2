import type { BackoffOptions } from './retry-policy.js';
import type { FlowParentResult } from './flow.js';
import { backoffProblem, maxAttemptsProblem } from './retry-policy.js';

/**
 * The version of the stored form this library writes and reads. An envelope says its version in `v`
 * (absent: 1, as entries written before the field existed); a worker never guesses at another one: it
 * dead-letters the task with reason `unsupported-version`. A change that older workers could misread
 * raises it; fields added that they may ignore do not.
 */
export const FORMAT_VERSION = 1;

/**
 * The version of a task a worker of version 1 would misread, so must not read (it dead-letters it as
 * `unsupported-version`): one with a coalescing key (latest wins: a version-1 worker would run the entry it
 * claimed, not the newest emitted for its key, and never release the key's record) or one of a batch (it
 * would never report the task settled, so the batch would never complete), or a node of a flow (likewise: its
 * flow would never hear it settled). Workers of this release read all three.
 */
export const FORMAT_VERSION_2 = 2;

/** How emits with one coalescing key combine (see `RedisTaskRecordBuilder.setCoalesceKey`). */
export type CoalesceMode = 'replace' | 'debounce' | 'keep-last' | 'supersede';

/** Each mode's one-letter name in the stored form and the enqueue script's arguments. */
export const COALESCE_MODE_CODES: Readonly<Record<CoalesceMode, string>> = {
  replace: 'r',
  debounce: 'd',
  'keep-last': 'k',
  supersede: 's',
};

/**
 * The stored form of a task: `<attempts>|<JSON envelope>`.
 *
 * The attempt count sits in a plain prefix so that Lua can count an attempt with a string match,
 * without decoding the JSON (Redis CPU is the queue's bottleneck).
 */
export interface TaskEnvelope {
  /** Version of the stored form (absent: 1). */
  readonly v?: number;
  /** Unique task id, chosen by the producer. */
  readonly id: string;
  readonly clientId: string;
  readonly payload: unknown;
  /** When the producer enqueued the task (milliseconds since the epoch, producer clock). */
  readonly enqueuedAt: number;
  /** Pub/sub channel of the `send()` caller waiting for the result, if any. */
  readonly replyTo?: string;
  /** Per-record override of the runs allowed in all. */
  readonly maxAttempts?: number;
  /** Per-record override of the retry backoff. */
  readonly backoff?: BackoffOptions;
  /** Higher runs first within its client (absent = 0). */
  readonly priority?: number;
  /** After this time (ms since the epoch) the task is not run: it goes to dead letters as `expired`. */
  readonly expiresAt?: number;
  /** The deduplication key (`deduplicationKey` of the record builder); named `dedupKey` in the stored form. */
  readonly dedupKey?: string;
  /** 1: the deduplication key is kept for its whole TTL after the task succeeded (freed on dead letters or cancel). */
  readonly dedupKeep?: 1;
  /** W3C trace context of the producer's span (OpenTelemetry), when there was one; never checked: a bad one starts a new trace. */
  readonly traceparent?: string;
  readonly tracestate?: string;
  /** 1: the task has an index (`QueueKeys.task`) that workers keep up to date (status, cancel, progress). */
  readonly track?: 1;
  /** 1: the `send()` caller listens for progress values (published on `replyTo`). */
  readonly progress?: 1;
  /** The coalescing key (latest wins; stored form version 2 only, first after `v`). */
  readonly coalesce?: string;
  /** How emits with the key combine: r, d, k or s (see COALESCE_MODE_CODES). */
  readonly coalesceMode?: string;
  /** The batch the task belongs to (stored form version 2 only, first after `v`): its settle is counted there. */
  readonly batch?: string;
  /** The flow the task is a node of (stored form version 2 only, first after `v`, then `node`): its settle is folded there. */
  readonly flow?: string;
  /** Its node id within its flow. */
  readonly node?: string;
  /**
   * 1: its success may release its children in its own settle (right after `node`; the flow was made on one
   * Redis server, not a Cluster, and left their tasks ready: scripts/include/flow.lua, `flowRelease`).
   */
  readonly fold?: 1;
  /** Its parents' outcomes, by node id, as they were when it was released (`ctx.parentResults()`). */
  readonly parents?: Readonly<Record<string, FlowParentResult>>;
  /**
   * Its payload is stored out of line under this body id (`QueueKeys.body`; scripts/include/body.lua), and
   * the envelope has no `payload`: the envelope's last field, so the scripts read it from the entry's tail.
   */
  readonly body?: string;
}

/** What a body id is made of (the scripts read it from an entry's tail with this class: include/body.lua). */
export const BODY_ID = /^[A-Za-z0-9_-]{1,60}$/;

export interface DecodedEntry {
  /** Runs already started before this claim (0 for a fresh task). */
  readonly attempts: number;
  readonly envelope: TaskEnvelope;
}

/** Why an entry cannot be run: `reason` in words; `version` when it is a well-formed entry of another version. */
export type DecodeFailure = { readonly ok: false; readonly reason: string; readonly version?: number };

export type DecodeResult = { ok: true; entry: DecodedEntry } | DecodeFailure;

export function encodeEntry(envelope: TaskEnvelope, attempts = 0): string {
  return `${attempts}|${JSON.stringify({ v: FORMAT_VERSION, ...envelope })}`;
}

/** Encodes a fresh task whose payload is already JSON, without serializing the payload twice. */
export function encodeNewEntry(meta: Omit<TaskEnvelope, 'payload'>, payloadJson: string): string {
  const reply = meta.replyTo === undefined ? '' : `,"replyTo":${JSON.stringify(meta.replyTo)}`;
  const attempts = meta.maxAttempts === undefined ? '' : `,"maxAttempts":${meta.maxAttempts}`;
  const backoff = meta.backoff === undefined ? '' : `,"backoff":${JSON.stringify(meta.backoff)}`;
  const priority = meta.priority ? `,"priority":${meta.priority}` : '';
  const expires = meta.expiresAt === undefined ? '' : `,"expiresAt":${meta.expiresAt}`;
  const dedup =
    meta.dedupKey === undefined
      ? ''
      : `,"dedupKey":${JSON.stringify(meta.dedupKey)}${meta.dedupKeep === 1 ? ',"dedupKeep":1' : ''}`;
  const trace =
    meta.traceparent === undefined
      ? ''
      : `,"traceparent":${JSON.stringify(meta.traceparent)}${meta.tracestate === undefined ? '' : `,"tracestate":${JSON.stringify(meta.tracestate)}`}`;
  const track = meta.track === 1 ? ',"track":1' : '';
  const progress = meta.progress === 1 ? ',"progress":1' : '';
  const parents = meta.parents === undefined ? '' : `,"parents":${JSON.stringify(meta.parents)}`;
  // A coalesced task's key and mode, a batch child's batch, or a flow node's flow and node come first: the Lua scripts read them
  // without decoding the rest.
  const head =
    meta.coalesce !== undefined
      ? `"v":${FORMAT_VERSION_2},"coalesce":${JSON.stringify(meta.coalesce)},"coalesceMode":${JSON.stringify(meta.coalesceMode)}`
      : meta.batch !== undefined
        ? `"v":${FORMAT_VERSION_2},"batch":${JSON.stringify(meta.batch)}`
        : meta.flow !== undefined
          ? `"v":${FORMAT_VERSION_2},"flow":${JSON.stringify(meta.flow)},"node":${JSON.stringify(meta.node)}${meta.fold === 1 ? ',"fold":1' : ''}`
          : `"v":${FORMAT_VERSION}`;
  // An out-of-line payload's body id comes last, in place of the payload (the scripts read the entry's tail).
  const payload = meta.body === undefined ? `,"payload":${payloadJson}` : `,"body":"${meta.body}"`;
  return `0|{${head},"id":${JSON.stringify(meta.id)},"clientId":${JSON.stringify(meta.clientId)},"enqueuedAt":${meta.enqueuedAt}${reply}${attempts}${backoff}${priority}${expires}${dedup}${trace}${track}${progress}${parents}${payload}}`;
}

/** Decodes an entry found in Redis; anything that is not a well-formed task is reported, never thrown. */
export function decodeEntry(raw: string): DecodeResult {
  const bar = raw.indexOf('|');
  const prefix = bar > 0 ? raw.slice(0, bar) : '';
  if (!/^\d{1,9}$/.test(prefix)) {
    return { ok: false, reason: 'the entry has no attempt count prefix' };
  }
  let value: unknown;
  try {
    value = JSON.parse(raw.slice(bar + 1));
  } catch {
    return { ok: false, reason: 'the entry is not valid JSON' };
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return { ok: false, reason: 'the entry is not a JSON object' };
  }
  const record = value as Record<string, unknown>;
  const unread = versionProblem(record);
  if (unread) return unread;
  for (const field of ['id', 'clientId'] as const) {
    if (typeof record[field] !== 'string' || record[field] === '') {
      return { ok: false, reason: `the entry's "${field}" is missing or not a non-empty string` };
    }
  }
  if (typeof record.enqueuedAt !== 'number' || !Number.isFinite(record.enqueuedAt)) {
    return { ok: false, reason: `the entry's "enqueuedAt" is missing or not a number` };
  }
  if (record.body !== undefined && (typeof record.body !== 'string' || !BODY_ID.test(record.body))) {
    return { ok: false, reason: `the entry's "body" (its out-of-line payload's id) is not a body id` };
  }
  if (!('payload' in record) && record.body === undefined) {
    return { ok: false, reason: `the entry has no "payload"` };
  }
  if (record.replyTo !== undefined && typeof record.replyTo !== 'string') {
    return { ok: false, reason: `the entry's "replyTo" is not a string` };
  }
  if (record.priority !== undefined && !isNonNegativeInteger(record.priority)) {
    return { ok: false, reason: `the entry's "priority" is not a non-negative integer` };
  }
  if (record.expiresAt !== undefined && (typeof record.expiresAt !== 'number' || !Number.isFinite(record.expiresAt))) {
    return { ok: false, reason: `the entry's "expiresAt" is not a number` };
  }
  if (record.dedupKey !== undefined && (typeof record.dedupKey !== 'string' || record.dedupKey === '')) {
    return { ok: false, reason: `the entry's "dedupKey" is not a non-empty string` };
  }
  // The value found is not repeated: it came from Redis, and reasons end up in logs.
  const retryProblem =
    (record.maxAttempts !== undefined ? withField('maxAttempts', maxAttemptsProblem(record.maxAttempts)) : undefined) ??
    (record.backoff !== undefined ? withField('backoff', backoffProblem(record.backoff)) : undefined);
  if (retryProblem) {
    return { ok: false, reason: retryProblem };
  }
  return { ok: true, entry: { attempts: Number(prefix), envelope: record as unknown as TaskEnvelope } };
}

/** Why an entry's format version (its `v`) cannot be read here, if it cannot. */
function versionProblem(record: Record<string, unknown>): DecodeResult | undefined {
  if (record.v === FORMAT_VERSION_2) {
    const problem = coalesceProblem(record);
    return problem ? { ok: false, reason: problem } : undefined;
  }
  if (record.v === undefined || record.v === FORMAT_VERSION) return undefined;
  if (typeof record.v !== 'number' || !Number.isSafeInteger(record.v) || record.v < 1) {
    return { ok: false, reason: `the entry's "v" (format version) is not a positive integer` };
  }
  return {
    ok: false,
    reason: `the entry is in format version ${record.v}; this worker reads versions ${FORMAT_VERSION} and ${FORMAT_VERSION_2}`,
    version: record.v,
  };
}

/** What is wrong with a version 2 entry's coalescing, batch or flow fields, if anything (it has one of them). */
function coalesceProblem(record: Record<string, unknown>): string | undefined {
  if (record.coalesce === undefined && record.batch === undefined && record.flow !== undefined) {
    return typeof record.flow === 'string' &&
      record.flow !== '' &&
      typeof record.node === 'string' &&
      record.node !== ''
      ? undefined
      : `the entry's "flow" and "node" (its flow id and node id) are not non-empty strings`;
  }
  if (record.coalesce === undefined && record.batch !== undefined) {
    return typeof record.batch === 'string' && record.batch !== ''
      ? undefined
      : `the entry's "batch" (its batch id) is not a non-empty string`;
  }
  if (typeof record.coalesce !== 'string' || record.coalesce === '') {
    return `the entry's "coalesce" (its coalescing key) is missing or not a non-empty string`;
  }
  if (typeof record.coalesceMode !== 'string' || !Object.values(COALESCE_MODE_CODES).includes(record.coalesceMode)) {
    return `the entry's "coalesceMode" is not one of r, d, k, s`;
  }
  return undefined;
}

/** Best-effort id of an undecodable entry, for logs and dead-letter records. */
export function guessTaskId(raw: string): string | undefined {
  return /"id"\s*:\s*"([^"]{1,200})"/.exec(raw)?.[1];
}

function isNonNegativeInteger(value: unknown): boolean {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}

function withField(name: string, found: { field: string; problem: string } | undefined): string | undefined {
  return found && `the entry's "${name}${found.field}" ${found.problem}`;
}
