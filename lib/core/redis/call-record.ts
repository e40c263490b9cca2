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

/**
 * A producer call's record: mode '1', a TTL covering the caller's wait, and a new call id that carries the
 * caller's deadline (`resentRecord` reads it back).
 */
export function firstSendRecord(deadline: number, timeoutMs: number): string {
  const ttl = Math.ceil(timeoutMs / 1_000) + CALL_RECORD_MARGIN_S;
  return `${CALL_MARKER}1${ttl}.${CALL_ID_PREFIX}.${deadline.toString(36)}.${(++callSequence).toString(36)}`;
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
 * The record of a call written again (ioredis resends a command whose reply a reconnection lost): mode '2'
 * while the caller's deadline (in a first send's id) has not passed, else '3'.
 */
export function resentRecord(record: string): string {
  // `{<mode><ttl>.<prefix>.<deadline base 36>.<counter>`: the mode is its second character.
  const deadline = parseInt(record.split('.')[2] ?? '', 36);
  return `${CALL_MARKER}${Number.isFinite(deadline) && Date.now() < deadline ? '2' : '3'}${record.slice(2)}`;
}
