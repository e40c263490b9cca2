import { randomBytes } from 'node:crypto';

/**
 * The enqueue call's record, in one place (enqueueTasks-1.lua reads it; see its header): the first ARGV of
 * an enqueue call, `{<mode><ttl>.<id>`. '{' marks it (a client id, which has no braces, never starts so);
 * the mode is one digit: '1' a first send, '2' the same call sent again (answered from the record if the
 * first send ran), '3' sent again after the caller's deadline (the record's answer, or nothing written);
 * the TTL is in seconds; the id is the call's own.
 */
export const CALL_MARKER = '{';

/** Margin of a call record's TTL past the caller's deadline (a resend sent before it may run a little after). */
const CALL_RECORD_MARGIN_S = 10;
/** This process's part of every call id (the rest: the caller's deadline and a counter, base 36). */
const CALL_ID_PREFIX = randomBytes(4).toString('base64url');
let callSequence = 0;

/** The start of this process's first-send records, by TTL (seconds): one string per TTL, not one per call. */
// table-ok: one entry per distinct call timeout
const FIRST_SEND_HEADS = new Map<number, string>();

/**
 * A producer call's record: mode '1', a TTL covering the caller's wait, and a new call id that carries the
 * caller's deadline (`writtenRecord` reads it back).
 */
export function firstSendRecord(deadline: number, timeoutMs: number): string {
  const ttl = Math.ceil(timeoutMs / 1_000) + CALL_RECORD_MARGIN_S;
  let head = FIRST_SEND_HEADS.get(ttl);
  if (head === undefined) {
    head = `${CALL_MARKER}1${ttl}.${CALL_ID_PREFIX}.`;
    FIRST_SEND_HEADS.set(ttl, head);
  }
  return `${head}${deadline.toString(36)}.${(++callSequence).toString(36)}`;
}

/**
 * A record named by its caller (a schedule's tick): mode '2' from the first send on, so every process that
 * fires the same tick writes its task once.
 */
export function namedRecord(recordId: string, ttlSeconds: number): string {
  return `${CALL_MARKER}2${ttlSeconds}.${recordId}`;
}

/** Whether an argument is a call record. */
export function isCallRecord(arg: string | undefined): boolean {
  return arg !== undefined && arg.startsWith(CALL_MARKER);
}

/**
 * How long a decision read from Redis may take to become an enqueue (ms): a batch's callbacks or a flow's
 * releases are enqueued under a deadline this long from when the script that decided them was sent, so no
 * enqueue of them lands later (see `writtenRecord`) and their guards need to outlast only this.
 */
export const DECIDED_ENQUEUE_MS = 10_000;

/**
 * How long the deduplication guard of a decided enqueue (a batch's callback, a flow's release or callback)
 * is kept once its task is on record and no fold decides it again (ms): past the deadline of any enqueue of
 * it still on its way from a process that decided before (`DECIDED_ENQUEUE_MS`), with a margin.
 */
export const SETTLED_GUARD_MS = 2 * DECIDED_ENQUEUE_MS;

/**
 * A call record as its call is written the `writes`-th time (ioredis writes a command again after a
 * reconnection when its reply was lost, and writes one first from its offline queue once Redis is back). A
 * first send's record (mode '1') written after its caller's deadline goes as '3': the caller was told it
 * failed, and what the call carries may have been decided from a read that no longer holds (a batch's
 * callback that ran and settled meanwhile); before the deadline it is '1' the first time, '2' after. A
 * named record goes as it is (mode '2' from the first send on).
 */
export function writtenRecord(record: string, writes: number): string {
  if (record.charCodeAt(1) !== MODE_FIRST) return record;
  const deadline = recordDeadline(record);
  if (Date.now() >= deadline) return `${CALL_MARKER}3${record.slice(2)}`;
  return writes > 1 ? `${CALL_MARKER}2${record.slice(2)}` : record;
}

/** '1', a first send's mode (the record's second character). */
export const MODE_FIRST = 0x31;

/**
 * The caller's deadline a record carries (`{<mode><ttl>.<prefix>.<deadline base 36>.<counter>`: its third
 * part), or NaN when it carries none (a record made otherwise). Read with `indexOf`, not `split`: once per
 * write of every enqueue call.
 */
export function recordDeadline(record: string): number {
  const first = record.indexOf('.', 2);
  const second = first < 0 ? -1 : record.indexOf('.', first + 1);
  if (second < 0) return Number.NaN;
  const third = record.indexOf('.', second + 1);
  return parseInt(record.slice(second + 1, third < 0 ? record.length : third), 36);
}
