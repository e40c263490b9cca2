import { randomBytes } from 'node:crypto';
import { CALL_MARKER, MODE_FIRST, recordDeadline } from './call-record.js';

/**
 * An enqueue call's record as one connection writes it (enqueueTasks-1.lua, modes '4' to '8').
 *
 * A first send's record (mode '1') makes a resend harmless by writing a key per call. On a connection, a
 * cheaper proof serves: Redis runs one connection's commands in the order they were written, and ioredis
 * writes a command again only after a reconnection, in its first order. So each call to a root is numbered
 * at its first write, and a call that ran moves the connection's mark for that root to its number, when no
 * lower call may still be written again without having run: none was unanswered when it was written, or the
 * mark holds the number just below (the lower ones ran). A call written again is then answered from the mark
 * (at or below it: it ran, and wrote every task) or from its own record (an answer that is not every task
 * written, or a call that could not move the mark). The mark is one key per connection, root and TTL, set
 * with KEEPTTL; its TTL (the record's and 2 s more) is renewed by a call at least every second.
 */

/**
 * This process's part of every session (a connection's calls to one root): '~' keeps it apart from call ids.
 * 72 random bits: sessions count from 1 in every process, so two processes whose random parts matched would
 * share marks (a call of one taken as run by the other's), and 32 bits would make that likely enough among
 * many processes over a deployment's life.
 */
const SESSION_PREFIX = `~${randomBytes(9).toString('base64url')}`;
let sessions = 0;
/** How often a session's mark has its TTL renewed, at least (ms): its TTL is the record's and 2 s more. */
export const MARK_RENEWAL_MS = 1_000;

/** Each connection's calls, by record TTL (seconds) and root. */
// table-ok: one entry per connection (weakly held), each one per TTL and root it enqueued to
const CALLS = new WeakMap<object, Map<number, Map<string, RootCalls>>>();

/** One root's calls on one connection (under one record TTL). */
export class RootCalls {
  /** Its mark's name part: `<root>:call:<session>`. */
  readonly session = `${SESSION_PREFIX}${(++sessions).toString(36)}`;
  private next = 1;
  /**
   * The numbers unanswered, in the order opened (from `head` on): answers mostly come in that order, so the
   * lowest is at `head`; one answered out of order waits in `early` until the lower ones are answered.
   */
  // table-ok: the calls in flight on one connection
  private readonly unanswered: number[] = [];
  private head = 0;
  // table-ok: calls answered before a lower one, on one connection
  private readonly early = new Set<number>();
  /** When a call that renewed the mark's TTL was first written, and answered (ms; none yet: -Infinity). */
  private renewedAt = Number.NEGATIVE_INFINITY;

  /** A call's first write: its number, the lowest unanswered (itself included), and whether it renews. */
  open(now: number): { readonly n: number; readonly lowest: number; readonly renews: boolean } {
    const n = this.next++;
    this.unanswered.push(n);
    return { n, lowest: this.unanswered[this.head], renews: now - this.renewedAt >= MARK_RENEWAL_MS };
  }

  /** A call answered (its command settled): it will not be written again. */
  settle(n: number, renewedAt: number | undefined): void {
    if (this.unanswered[this.head] !== n) this.early.add(n);
    else {
      this.head++;
      while (this.head < this.unanswered.length && this.early.delete(this.unanswered[this.head])) this.head++;
      if (this.head === this.unanswered.length) {
        this.unanswered.length = 0;
        this.head = 0;
      }
    }
    if (renewedAt !== undefined && renewedAt > this.renewedAt) this.renewedAt = renewedAt;
  }
}

/** The calls of a connection to a root under a record TTL. */
export function callsOf(connection: object, root: string, ttlSeconds: number): RootCalls {
  let byTtl = CALLS.get(connection);
  if (!byTtl) CALLS.set(connection, (byTtl = new Map()));
  let byRoot = byTtl.get(ttlSeconds);
  if (!byRoot) byTtl.set(ttlSeconds, (byRoot = new Map()));
  let calls = byRoot.get(root);
  if (!calls) byRoot.set(root, (calls = new RootCalls()));
  return calls;
}

/**
 * The record of one enqueue call, write by write, on a connection: `next()` before each write (the command's
 * and, after NOSCRIPT, its EVAL's), `settle(ok)` once it is answered. A record that is not a first send's
 * (a named record: mode '2' from the first send) goes as it is.
 */
export class SequencedRecord {
  private readonly deadline: number;
  private readonly ttlSeconds: number;
  private calls: RootCalls | undefined;
  private n = 0;
  private head = '';
  private renews = false;
  private openedAt = 0;

  private constructor(
    private readonly connection: object,
    private readonly root: string,
    private readonly first: string,
    deadline: number,
  ) {
    this.deadline = deadline;
    this.ttlSeconds = parseInt(first.slice(2, first.indexOf('.')), 10);
  }

  /** A first send's record (mode '1', its id carrying the caller's deadline) numbered on a connection; else none. */
  static of(connection: object, root: string, record: string): SequencedRecord | undefined {
    if (record.charCodeAt(1) !== MODE_FIRST) return undefined;
    const deadline = recordDeadline(record);
    return Number.isNaN(deadline) ? undefined : new SequencedRecord(connection, root, record, deadline);
  }

  /** The record for the command's next write. */
  next(): string {
    const now = Date.now();
    if (!this.calls) {
      // Written first after its deadline: '3', nothing new written (and no number taken).
      if (now >= this.deadline || !(this.ttlSeconds > 0)) return `${CALL_MARKER}3${this.first.slice(2)}`;
      this.calls = callsOf(this.connection, this.root, this.ttlSeconds);
      const opened = this.calls.open(now);
      this.n = opened.n;
      this.renews = opened.renews;
      this.openedAt = now;
      this.head = `${this.ttlSeconds}.${this.calls.session}.${opened.n.toString(36)}.${opened.lowest.toString(36)}`;
      return `${CALL_MARKER}${this.renews ? '5' : '4'}${this.head}`;
    }
    if (now >= this.deadline) return `${CALL_MARKER}8${this.head}`;
    return `${CALL_MARKER}${this.renews ? '7' : '6'}${this.head}`;
  }

  /** The call was answered: `ran` when Redis ran it (any reply but an error or -1). */
  settle(ran: boolean): void {
    this.calls?.settle(this.n, ran && this.renews ? this.openedAt : undefined);
  }
}
