import type { DurabilityOptions } from '../config/options.js';
import type { QueueKeys } from '../redis/keys.js';
import { enqueueAnswer, gatewayOf, type EnqueueCall, type EnqueueCalls } from '../redis/gateway.js';
import { perConnection } from '../redis/per-connection.js';
import { SlotSet } from '../support/churn-tables.js';
import type { PreparedTask } from './task-items.js';

/** One caller's tasks for one shard, and how to answer that caller. */
export interface EnqueuePart {
  readonly keys: QueueKeys;
  readonly tasks: readonly PreparedTask[];
  /** Set when the part went to Redis in a script call. */
  sent: boolean;
  /** Set once the caller was answered or failed: a settled part is never sent, nor answered again. */
  settled: boolean;
  /** The call's results; this part's are `results[at]` to `results[at + tasks.length - 1]`. */
  answer(results: readonly (0 | string)[], at: number): void;
  fail(error: Error | typeof TIMED_OUT | ReplicationShortfall): void;
}

/** How the calls of a group of producers are made: producers with the same settings share calls. */
export interface CallSettings {
  /** Most tasks in one script call (a part is never split: a caller's chunk stays all or nothing). */
  readonly chunkSize: number;
  /** A call not answered in this long fails its parts as maybe written. */
  readonly timeoutMs: number;
  readonly durability?: DurabilityOptions;
}

/** The call got no answer within its timeout (it may have been written). */
export const TIMED_OUT = Symbol('timed out');

/** The enqueue was written, but fewer replicas than asked confirmed it in time. */
export class ReplicationShortfall {
  constructor(readonly acknowledged: number) {}
}

interface Bucket {
  readonly signature: string;
  readonly settings: CallSettings;
  readonly keys: QueueKeys;
  readonly parts: EnqueuePart[];
}

/**
 * Coalesced enqueue: every part handed over in one event-loop turn (emits and batches of every
 * producer on one connection) goes to Redis as one script call per shard and settings, chunked by
 * `chunkSize`, right after the turn's synchronous code and promise callbacks ran (`process.nextTick`,
 * no timer: a lone emit is not delayed). Each part is answered on its own when the call returns, about
 * ANSWER_SLICE tasks' callers at a time (see answer).
 */
export class EnqueueCoalescer {
  /**
   * The parts waiting for this turn's flush, by settings signature and shard root (a few buckets: a
   * list searched in order). A new list each turn, never `Map.clear()`: a cleared table points to its
   * successor, so once one was promoted, every later turn's parts survived scavenges through that chain.
   */
  private waiting: Bucket[] = [];
  private scheduled = false;
  private readonly deadlines = new Deadlines();
  /** The rest of each call answered in part (see answer). */
  private readonly answering = new SlotSet<() => void>();

  constructor(private readonly gateway: EnqueueCalls) {}

  add(signature: string, settings: CallSettings, part: EnqueuePart): void {
    const root = part.keys.root;
    let bucket: Bucket | undefined;
    for (const waiting of this.waiting) {
      if (waiting.keys.root === root && waiting.signature === signature) bucket = waiting;
    }
    if (bucket) bucket.parts.push(part);
    else this.waiting.push({ signature, settings, keys: part.keys, parts: [part] });
    if (!this.scheduled) {
      this.scheduled = true;
      process.nextTick(this.flush);
    }
  }

  private readonly flush = (): void => {
    this.scheduled = false;
    const buckets = this.waiting;
    this.waiting = [];
    for (const bucket of buckets) this.flushBucket(bucket);
  };

  private flushBucket({ settings, keys, parts }: Bucket): void {
    let call: EnqueuePart[] = [];
    let size = 0;
    for (const part of parts) {
      if (part.settled) continue; // failed while waiting (the producer closed): never sent
      if (size > 0 && size + part.tasks.length > settings.chunkSize) {
        this.call(settings, keys, call);
        call = [];
        size = 0;
      }
      call.push(part);
      size += part.tasks.length;
    }
    if (call.length > 0) this.call(settings, keys, call);
  }

  private call(settings: CallSettings, keys: QueueKeys, parts: EnqueuePart[]): void {
    const call = this.deadlines.add(parts, settings.timeoutMs);
    for (const part of parts) part.sent = true;
    const request: EnqueueCall = { deadline: call.deadline, timeoutMs: settings.timeoutMs, batches: parts };
    const durability = settings.durability;
    const written = durability
      ? this.gateway.enqueueReplicated(keys, request, durability).then((replicated) => {
          if (replicated.kind === 'short') throw new ReplicationShortfall(replicated.acknowledged);
          return replicated.results;
        })
      : this.gateway.enqueue(keys, request);
    written.then(
      (answered) => {
        this.deadlines.delete(call);
        let results: (0 | string)[];
        try {
          results = enqueueAnswer(answered);
        } catch (error) {
          for (const part of parts) part.fail(error as Error);
          return;
        }
        this.answer(parts, results, 0, 0);
      },
      (error: unknown) => {
        this.deadlines.delete(call);
        for (const part of parts)
          part.fail(error instanceof Error || error instanceof ReplicationShortfall ? error : new Error(String(error)));
      },
    );
  }

  /**
   * Answers the parts of a call from `index` on, about ANSWER_SLICE tasks at a time. Callers go on as
   * their answers come, and those that enqueue again do so in the next flush; answering the rest after
   * that flush lets Redis run the first slice's new call while this process answers the next slice,
   * instead of Redis and this process taking turns on one call per round.
   */
  private answer(parts: readonly EnqueuePart[], results: readonly (0 | string)[], index: number, at: number): void {
    let answered = 0;
    while (index < parts.length && (answered === 0 || answered + parts[index].tasks.length <= ANSWER_SLICE)) {
      const part = parts[index++];
      part.answer(results, at);
      at += part.tasks.length;
      answered += part.tasks.length;
    }
    if (index === parts.length) return;
    const rest = (): void => {
      this.answering.delete(slot, rest);
      this.answer(parts, results, index, at);
    };
    const slot = this.answering.add(rest);
    // A tick scheduled from a microtask runs once every microtask ran: the callers answered above have
    // handed over their next parts by then.
    queueMicrotask(() =>
      process.nextTick(() => {
        if (!this.answering.has(slot, rest)) return; // answered already (see answerWaiting)
        if (this.scheduled) this.flush();
        rest();
      }),
    );
  }

  /** Answers at once every caller whose answer came but waits for its slice (a producer is closing). */
  answerWaiting(): void {
    for (let waiting = this.answering.values(); waiting.length > 0; waiting = this.answering.values()) {
      for (const rest of waiting) rest();
    }
  }
}

/** About how many tasks' callers are answered before the calls they make are sent. */
const ANSWER_SLICE = 32;

interface Call {
  readonly parts: readonly EnqueuePart[];
  /** Its place in the calls waiting (see SlotSet). */
  slot: number;
  /** When its parts fail as maybe written, unless answered (Date.now() ms). */
  readonly deadline: number;
}

/**
 * The calls waiting for Redis, failed once past their deadline. One shared, unref'd interval checks
 * them (kept while calls come, stopped once none is waiting), instead of a timer made and cleared per
 * call: a call fails within its timeout, up to one check earlier.
 */
class Deadlines {
  private readonly calls = new SlotSet<Call>();
  private timer: NodeJS.Timeout | undefined;
  private everyMs = 0;

  /** Tracks a call sent now; it fails within `timeoutMs` (up to one check earlier) unless answered. */
  add(parts: readonly EnqueuePart[], timeoutMs: number): Call {
    const everyMs = Math.min(100, Math.max(1, Math.floor(timeoutMs / 20)));
    const call: Call = { parts, deadline: Date.now() + timeoutMs - everyMs, slot: 0 };
    call.slot = this.calls.add(call);
    if (!this.timer || everyMs < this.everyMs) {
      if (this.timer) clearInterval(this.timer);
      this.everyMs = everyMs;
      this.timer = setInterval(() => this.check(), everyMs);
      this.timer.unref();
    }
    return call;
  }

  delete(call: Call): void {
    this.calls.delete(call.slot, call);
  }

  private check(): void {
    if (this.calls.size === 0) {
      clearInterval(this.timer);
      this.timer = undefined;
      return;
    }
    const now = Date.now();
    for (const call of this.calls.values()) {
      if (call.deadline > now) continue;
      this.delete(call);
      for (const part of call.parts) part.fail(TIMED_OUT);
    }
  }
}

/** The coalescer of a connection, shared by every producer using it. */
export const coalescerOf = perConnection((redis) => new EnqueueCoalescer(gatewayOf(redis)));
