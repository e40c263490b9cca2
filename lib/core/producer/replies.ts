import {
  ClosedError,
  DuplicateTaskError,
  InvalidTaskError,
  ReplyTimeoutError,
  ResultTooLargeError,
  UnserializableResultError,
  TaskCancelledError,
  TaskFailedError,
  TaskReplacedError,
} from '../model/errors.js';
import { errorMessage } from '../support/logger.js';
import { openBlockingConnection, quit } from '../redis/connection.js';
import { isReplyError, type ReplyMessage } from '../model/reply.js';
import type { TaskStore } from '../redis/store.js';
import { IdTable } from '../support/churn-tables.js';
import { scrubbed } from '../support/redact.js';
import type { QueueKeys } from '../redis/keys.js';
import type { PreparedTask } from '../model/prepared-task.js';
import type { TaskLogger } from '../support/logger.js';
import type { TaskProducer } from './producer.js';
import type { EnqueueAnswer } from './producer-types.js';
import type { EnqueueItem } from './task-items.js';

/** How a caller is answered: the handler's result, or an error. */
export type ReplyAnswer = { readonly response: unknown } | { readonly err: unknown };

interface Waiting {
  readonly id: string;
  readonly queue: string;
  readonly clientId: string;
  readonly answer: (answer: ReplyAnswer) => void;
  /** When the caller stops waiting (Date.now() ms); 0: never. */
  readonly deadline: number;
  /** Hears the handler's progress values, when the caller asked for them. */
  readonly onProgress?: (value: unknown) => void;
  /** The sequence of the last progress value heard (a resent report repeats one). */
  progressSeq: number;
}

export interface ReplyInboxOptions {
  /** How long a caller waits (0: for ever). */
  readonly replyTimeoutMs: number;
  /** Whether a task whose caller gave up is removed when no worker claimed it yet. */
  readonly cancelOnReplyTimeout: boolean;
}

/**
 * The replies of one client's `send()` calls: subscribed to its own reply channel (on first use),
 * each waiting caller answered once, by the live reply, by the result stored in Redis when the
 * subscriber was away when it was published, by its timeout, or by close().
 */
export class ReplyInbox {
  /** The callers waiting, by task id (one per send(): no Map, see IdTable). */
  private readonly waiting = new IdTable<Waiting>();
  /** Their tasks, where they were written, so a caller that gives up can cancel its task. */
  private readonly written = new IdTable<{ readonly keys: QueueKeys; readonly task: PreparedTask }>();
  /** One check of the deadlines for all waiting callers, instead of a timer made and cleared per call. */
  private deadlines: NodeJS.Timeout | undefined;
  private subscription: ReplySubscription | undefined;
  /** Counts close() calls: a subscription that lands after one is closed, not kept. */
  private generation = 0;
  /** Aborted by close(): a subscription under way gives up (its connection closed at once). */
  private closed = new AbortController();
  private subscribing: Promise<void> | undefined;
  /** Set once subscribed (until close): a send() then enqueues without waiting on `subscribed()`. */
  private listening = false;

  constructor(
    /** Where replies arrive and tasks are cancelled (`redisReplyRoute` in use; a unit test scripts it). */
    private readonly route: ReplyRoute,
    private readonly producer: Pick<TaskProducer, 'enqueueOneTo'>,
    readonly channel: string,
    private readonly options: ReplyInboxOptions,
    private readonly logger: TaskLogger,
    /** The error of a call that could not reach Redis in time (nothing was written). */
    private readonly unavailable: (queue: string, why: string) => Error,
  ) {}

  /**
   * A `send()`: enqueues `item` (with its `id`, and this inbox's channel as its `replyTo`) and answers the
   * caller once: the handler's result or error, `DuplicateTaskError` for a refused duplicate (it never runs
   * under this id: no reply would come), or why it could not be written. The first call subscribes first
   * (no reply before anyone listens), by `deadline`: past it the caller hears that nothing was written, not
   * a reply timeout much later. Returns how to stop waiting (the caller unsubscribed).
   */
  send(
    queue: string,
    item: EnqueueItem & { readonly id: string },
    deadline: number,
    answer: (answer: ReplyAnswer) => void,
    onProgress?: (value: unknown) => void,
  ): () => void {
    const id = item.id;
    if (this.waiting.get(id) !== undefined) {
      // A caller's own id (setId) given twice while the first still waits: its reply would go to one of them.
      answer({
        err: new InvalidTaskError(`a send() of task id "${id}" still waits for its reply: give each task its own id`),
      });
      return () => undefined;
    }
    // A stored reply is found in the task's shard: picked by its coalescing key when it has one.
    const stop = this.expect(id, queue, item.coalesce?.key ?? item.clientId, answer, onProgress);
    const enqueued: EnqueueAnswer = {
      written: (receipt) => {
        if (receipt.duplicate) this.failed(id, new DuplicateTaskError(queue, receipt.id));
      },
      failed: (error) => this.failed(id, error),
    };
    try {
      // Subscribed already (every send() but the first): enqueue now, with no promise to wait on first.
      if (this.listening) this.producer.enqueueOneTo(queue, item, enqueued);
      else
        this.subscribedBy(deadline).then((subscribed) => {
          if (subscribed) this.producer.enqueueOneTo(queue, item, enqueued, deadline);
          else enqueued.failed(this.unavailable(queue, 'the reply channel could not be subscribed'));
        }, enqueued.failed);
    } catch (error) {
      enqueued.failed(error);
    }
    return stop;
  }

  /**
   * Waits for the reply of task `id` (enqueue it after `subscribed()`); returns how to stop waiting
   * (the caller unsubscribed). Each caller is answered at most once.
   */
  expect(
    id: string,
    queue: string,
    clientId: string,
    answer: (answer: ReplyAnswer) => void,
    onProgress?: (value: unknown) => void,
  ): () => void {
    const timeoutMs = this.options.replyTimeoutMs;
    const deadline = timeoutMs > 0 ? Date.now() + timeoutMs : 0;
    this.waiting.set(id, { id, queue, clientId, answer, deadline, onProgress, progressSeq: 0 });
    if (timeoutMs > 0 && !this.deadlines) {
      // Checked every 1/20 of the timeout (1 ms to 1 s): a caller hears within 5% after its timeout, never before.
      this.deadlines = setInterval(
        () => this.checkDeadlines(),
        Math.min(1_000, Math.max(1, Math.floor(timeoutMs / 20))),
      );
    }
    return () => this.forget(id);
  }

  /** The caller's task could not be enqueued: it hears why (once), and nothing waits for it. */
  failed(id: string, error: unknown): void {
    const waiting = this.waiting.get(id);
    this.forget(id);
    waiting?.answer({ err: error });
  }

  /** Subscribed to the reply channel (once; a failed attempt is retried by the next call). */
  subscribed(): Promise<void> {
    this.subscribing ??= (async () => {
      const generation = this.generation;
      const subscription = await this.route.subscribe(
        this.channel,
        (message) => this.onReply(message),
        () => void this.fetchMissed(),
        this.closed.signal,
      );
      if (generation !== this.generation) {
        await subscription.close(); // closed while subscribing
        return;
      }
      this.subscription = subscription;
      this.listening = true;
    })().catch((error: unknown) => {
      this.subscribing = undefined;
      throw error;
    });
    return this.subscribing;
  }

  /** Subscribed by `deadline`: resolves false past it (the subscription goes on trying for the next call). */
  subscribedBy(deadline: number): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<false>((resolve) => {
      timer = setTimeout(() => resolve(false), Math.max(0, deadline - Date.now()));
    });
    return Promise.race([this.subscribed().then(() => true), late]).finally(() => clearTimeout(timer));
  }

  /** Whether the reply channel is subscribed (replies published from now on are heard). */
  get isSubscribed(): boolean {
    return this.listening;
  }

  /** Every waiting caller hears `ClosedError`; the subscriber is closed. */
  async close(): Promise<void> {
    this.listening = false;
    clearInterval(this.deadlines);
    this.deadlines = undefined;
    for (const waiting of this.waiting.values()) {
      this.forget(waiting.id);
      waiting.answer({ err: new ClosedError('RedisTaskClient') });
    }
    this.generation++; // a subscription under way closes itself when it lands
    this.closed.abort();
    this.closed = new AbortController();
    this.subscribing = undefined;
    const subscription = this.subscription;
    this.subscription = undefined;
    if (subscription) await subscription.close();
  }

  /** A send() task handed over to be written, and where (the producer tells, for `cancel`). */
  handed(keys: QueueKeys, task: PreparedTask): void {
    this.written.set(task.id, { keys, task });
  }

  private forget(id: string): void {
    this.waiting.delete(id);
    this.written.delete(id);
  }

  /**
   * Removes a send() task whose caller gave up, if no worker has claimed it yet. Resolves true when it
   * was removed (it will not run), false when it was already claimed (it runs; nobody waits for it).
   */
  private async cancel(id: string): Promise<boolean> {
    const written = this.written.get(id);
    this.written.delete(id);
    if (!written) return false;
    return scrubbed(this.route.cancel(written.keys, written.task));
  }

  /** Callers past their deadline time out; the check stops while nobody waits. */
  private checkDeadlines(): void {
    if (this.waiting.size === 0) {
      clearInterval(this.deadlines);
      this.deadlines = undefined;
      return;
    }
    const now = Date.now();
    for (const waiting of this.waiting.values()) {
      if (waiting.deadline <= now) this.timedOut(waiting);
    }
  }

  private timedOut(waiting: Waiting): void {
    const { id, queue } = waiting;
    if (!this.waiting.delete(id)) return;
    const timeoutMs = this.options.replyTimeoutMs;
    if (!this.options.cancelOnReplyTimeout) {
      this.written.delete(id);
      waiting.answer({ err: new ReplyTimeoutError(queue, timeoutMs) });
      return;
    }
    void this.cancel(id).then(
      (cancelled) => waiting.answer({ err: new ReplyTimeoutError(queue, timeoutMs, cancelled) }),
      () => waiting.answer({ err: new ReplyTimeoutError(queue, timeoutMs) }),
    );
  }

  private onReply(message: string): void {
    let reply: ReplyMessage;
    try {
      reply = JSON.parse(message) as ReplyMessage;
    } catch {
      this.logger.warn('ignored a reply that is not valid JSON');
      return;
    }
    const waiting = this.waiting.get(reply.id);
    if (!waiting) return; // timed out, unsubscribed, or already answered
    if (isProgressMessage(reply)) {
      this.heardProgress(waiting, reply);
      return;
    }
    this.forget(reply.id);
    waiting.answer(
      reply.err !== undefined ? { err: replyErrorOf(reply.err, waiting.queue) } : { response: reply.response },
    );
  }

  /** A progress value, told to a caller that listens: each sequence once, in order (a resent report repeats one). */
  private heardProgress(waiting: Waiting, message: ProgressMessage): void {
    if (!waiting.onProgress || message.seq <= waiting.progressSeq) return;
    waiting.progressSeq = message.seq;
    try {
      waiting.onProgress(message.progress);
    } catch (error) {
      this.logger.warn(`an onProgress listener of "${waiting.queue}" threw: ${errorMessage(error)}`);
    }
  }

  private async fetchMissed(): Promise<void> {
    for (const waiting of this.waiting.values()) {
      const id = waiting.id;
      const stored = await this.route.storedReply(waiting.queue, waiting.clientId, id).catch(() => null);
      if (stored !== null) this.onReply(stored);
    }
  }
}

/** What a progress report publishes on a caller's reply channel (see reportProgress-1.lua). */
interface ProgressMessage {
  readonly id: string;
  readonly progress: unknown;
  readonly seq: number;
}

function isProgressMessage(message: ReplyMessage): message is ReplyMessage & ProgressMessage {
  return 'progress' in message && typeof (message as { seq?: unknown }).seq === 'number';
}

/**
 * The caller's error for a reply's error: a cancelled task's `TaskCancelledError`, a worker of this release's
 * record as `TaskFailedError` (its type kept), an older worker's raw filter output as it came.
 */
function replyErrorOf(err: unknown, queue: string): unknown {
  if (isReplyError(err)) {
    if (err.name === 'TaskReplacedError' && err.code === 'TASK_REPLACED') {
      const by = (err as { replacedBy?: unknown }).replacedBy;
      return new TaskReplacedError(queue, err.taskId, typeof by === 'string' ? by : '');
    }
    if (err.name === 'ResultTooLargeError' && err.code === 'RESULT_TOO_LARGE') {
      const { bytes, limit } = err as { bytes?: unknown; limit?: unknown };
      return new ResultTooLargeError(queue, err.taskId, Number(bytes), Number(limit));
    }
    if (err.name === 'UnserializableResultError' && err.code === 'UNSERIALIZABLE_RESULT') {
      const detail = (err as { detail?: unknown }).detail;
      return new UnserializableResultError(queue, typeof detail === 'string' ? detail : err.message, err.taskId);
    }
    if (err.name === 'TaskCancelledError' && err.code === 'TASK_CANCELLED') {
      const detail = (err as { detail?: unknown }).detail;
      return new TaskCancelledError(queue, err.taskId, typeof detail === 'string' ? detail : '');
    }
    return new TaskFailedError(err);
  }
  return err;
}

/** An open subscription to a reply channel. */
export interface ReplySubscription {
  close(): Promise<void>;
}

/**
 * Where a reply inbox's replies arrive, and how it cancels a task whose caller gave up: a subscriber of
 * its own on the channel (each reply to `onReply`; `onResubscribed` after a reconnection, when replies
 * published meanwhile are read back with `storedReply`), and the cancel script.
 */
export interface ReplyRoute {
  subscribe(
    channel: string,
    onReply: (message: string) => void,
    onResubscribed: () => void,
    /** Aborted when the inbox closes: a subscription under way closes its connection at once. */
    signal: AbortSignal,
  ): Promise<ReplySubscription>;
  /** The reply stored under the task's result key (it outlives a subscriber that was away), or null. */
  storedReply(queue: string, clientId: string, id: string): Promise<string | null>;
  /** cancelTask: true when the task was still waiting and is removed; false when claimed or gone. */
  cancel(keys: QueueKeys, task: PreparedTask): Promise<boolean>;
}

/** The reply route over Redis: a blocking connection subscribed to the channel, the result keys, cancelTask. */
export function redisReplyRoute(store: TaskStore, producer: Pick<TaskProducer, 'layout'>): ReplyRoute {
  const redis = store.redis;
  return {
    async subscribe(channel, onReply, onResubscribed, signal) {
      const subscriber = openBlockingConnection(redis, 'tasks:client:replies');
      const cut = () => void quit(subscriber);
      signal.addEventListener('abort', cut, { once: true });
      subscriber.on('error', () => undefined); // reported once by the command connection's watcher
      subscriber.on('message', (_channel: string, message: string) => onReply(message));
      let subscribedOnce = false;
      subscriber.on('ready', () => {
        // Replies published while the subscriber was away are still stored under the result key.
        if (subscribedOnce) onResubscribed();
      });
      try {
        await subscriber.subscribe(channel);
      } catch (error) {
        await quit(subscriber);
        throw error;
      }
      subscribedOnce = true;
      signal.removeEventListener('abort', cut);
      return { close: () => quit(subscriber) };
    },
    async storedReply(queue, clientId, id) {
      const layout = await producer.layout(queue);
      return redis.get(layout.shardOf(clientId).result(id));
    },
    cancel: (keys, task) => store.gateway.track.cancel(keys, task),
  };
}
