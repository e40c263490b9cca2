import { randomUUID } from 'node:crypto';
import { encodeNewEntry } from './codec.js';
import type { ConnectionWatch } from './connection.js';
import { scrubbed } from './redact.js';
import { describe } from './options-describe.js';
import { validateBackoff, validateMaxAttempts } from './retry-policy.js';
import { MAX_DEDUP_KEY_LENGTH, MAX_DELAY_MS, MAX_PRIORITY, nameProblem, patternProblem } from './rules.js';
import { isPermissionError } from './guardrails.js';
import { ClosedError, InvalidTaskError, RedisConfigurationError, RedisPermissionError, PayloadTooLargeError, RedisUnavailableError, ReplicationTimeoutError } from './errors.js';
import type { QueueKeys, QueueLayout } from './keys.js';
import type { DurabilityOptions } from './options.js';
import type { ShardCounts } from './shard-counts.js';
import type { BackoffOptions } from './retry-policy.js';
import { ScriptKeys } from './script-keys.js';
import type { TaskRedis } from './scripts.js';

/** One task to enqueue. */
export interface EnqueueItem {
  readonly payload: unknown;
  readonly clientId: string;
  /** Reply channel of a `send()` caller. */
  readonly replyTo?: string;
  /** Task id; generated when absent. */
  readonly id?: string;
  readonly maxAttempts?: number;
  readonly backoff?: BackoffOptions;
  /** Higher runs first within its client; 0 (the default) is the plain FIFO list. */
  readonly priority?: number;
  /** Run no earlier than this many ms from now (Redis clock). */
  readonly delayMs?: number;
  /** Run no earlier than this time (ms since the epoch); turned into a delay at enqueue. */
  readonly runAt?: number;
  /** Not run after this time (ms since the epoch): dead letters with reason `expired`. */
  readonly expiresAt?: number;
  /** A second live task with this key is refused (reported as a duplicate). */
  readonly dedupKey?: string;
  /** How long the deduplication key holds at most, if the task never completes (ms). */
  readonly dedupTtlMs?: number;
}

/** What `enqueue` reports per item. */
export interface EnqueueReceipt {
  /** The task id; for a duplicate, the id of the live task that holds the deduplication key. */
  readonly id: string;
  /** True when the item was refused because a live task holds its deduplication key. */
  readonly duplicate: boolean;
}

export interface ProducerOptions {
  readonly maxPayloadBytes: number;
  /** Items per script call: each chunk is one round trip, all or nothing. */
  readonly batchChunkSize: number;
  /** Default TTL of deduplication keys (ms). */
  readonly dedupTtlMs: number;
  /** Replicas that must confirm each enqueue, in the same round trip (WAIT). */
  readonly durability?: DurabilityOptions;
  /** Longest wait for Redis per enqueue call, from the call to its answer (ms). */
  readonly enqueueTimeoutMs: number;
  /** The server as host:port, for errors. */
  readonly server: string;
  /** What the connection reported: its last error, and a cause no retry heals. */
  readonly watch: ConnectionWatch;
  /** Awaited once the connection is ready and before the first write (the start-up checks). */
  readonly ready?: () => Promise<void>;
}

export function newTaskId(): string {
  return randomUUID().replaceAll('-', '');
}

/** KEYS index the enqueue script reads as "no key" (see enqueueTasks-7+n.lua). */
const NO_KEY = 4;

/**
 * Enqueues tasks durably: the promise resolves only once Redis has written them (and, with
 * `durability`, once enough replicas confirmed). Every item is checked before anything is sent; each
 * chunk of `batchChunkSize` items of one shard is one script call (one round trip, all or nothing).
 */
export class TaskProducer {
  /** Tasks of send() calls still waiting for their reply, so a caller that gives up can cancel them. */
  private readonly awaitingReply = new Map<string, { readonly keys: QueueKeys; readonly task: Prepared }>();
  /** Patterns this producer has recorded in the prefix's list of patterns. */
  private readonly announced = new Set<string>();
  /** Enqueue calls under way, each with how to fail it when the producer closes. */
  private readonly calls = new Set<(closed: Error) => void>();

  constructor(
    private readonly redis: TaskRedis,
    private readonly layouts: ShardCounts,
    private readonly options: ProducerOptions,
  ) {}

  /**
   * Fails every enqueue still waiting (the client is closing): with nothing sent, it is known not
   * written; with the write sent, it may have been.
   */
  close(): void {
    for (const fail of [...this.calls]) fail(new ClosedError('RedisTaskClient'));
  }

  /**
   * Enqueues within `enqueueTimeoutMs`: a connection that is down gets no command (known not written)
   * until it is ready again; a command sent whose answer does not come in time is reported as maybe
   * written. Either way the caller hears within the timeout, with the pattern and server named.
   */
  async enqueue(queue: string, items: readonly EnqueueItem[]): Promise<EnqueueReceipt[]> {
    const problem = patternProblem(queue);
    if (problem) {
      throw new InvalidTaskError(`the pattern ${problem}, got ${describe(queue)}`);
    }
    if (items.length === 0) {
      return [];
    }
    const now = Date.now();
    const batch = items.length > 1;
    // Checked before anything else: one invalid item rejects the call with nothing sent.
    const prepared = items.map((item, index) => this.prepare(item, now, batch ? index : undefined));
    let sent = false;
    let gaveUp = false;
    let fail!: (error: Error) => void;
    const failed = new Promise<never>((_, reject) => {
      fail = (error) => {
        gaveUp = true;
        reject(error);
      };
    });
    const timeoutMs = this.options.enqueueTimeoutMs;
    const timer = setTimeout(() => fail(this.unavailable(queue, sent ? 'unknown' : false)), timeoutMs);
    const onClose = (closed: Error) => fail(sent ? this.unavailable(queue, 'unknown', 'the client closed before Redis answered') : closed);
    this.calls.add(onClose);
    try {
      return await scrubbed(Promise.race([
        failed,
        (async () => {
          await this.options.watch.whenReady(timeoutMs + 1).catch((error: unknown) => {
            // A refused password or an untrusted certificate: no wait will help, so fail now.
            if (error instanceof RedisConfigurationError) fail(error);
            return failed;
          });
          // Once the caller was told "nothing was written" (timeout, close), nothing may be sent after all.
          if (gaveUp) return failed;
          await this.options.ready?.();
          if (gaveUp) return failed;
          sent = true;
          return this.enqueueReady(queue, prepared);
        })(),
      ]));
    } catch (error) {
      // An ACL refusal heals by no retry: say so, with what to allow.
      throw isPermissionError(error) ? new RedisPermissionError(this.layouts.prefix, (error as Error).message) : error;
    } finally {
      clearTimeout(timer);
      this.calls.delete(onClose);
    }
  }

  private unavailable(queue: string, written: false | 'unknown', reason = this.options.watch.lastError): RedisUnavailableError {
    return new RedisUnavailableError(queue, this.options.server, this.options.enqueueTimeoutMs, written, reason);
  }

  private async enqueueReady(queue: string, prepared: Prepared[]): Promise<EnqueueReceipt[]> {
    const layout = await this.layouts.layout(queue);
    if (!this.announced.has(queue)) {
      // Once per pattern and process: admin tools list a pattern that has tasks but never had a worker
      // (a misspelt pattern is otherwise invisible).
      await this.redis.sadd(this.layouts.queuesKey, queue);
      this.announced.add(queue);
    }
    if (layout.shardCount === 1) {
      return this.enqueueShard(layout.shards[0], prepared);
    }
    // Each shard is its own slot (possibly its own node): one call per shard, receipts in item order.
    const byShard = new Map<QueueKeys, number[]>();
    prepared.forEach((task, index) => {
      const shard = layout.shardOf(task.clientId);
      const indexes = byShard.get(shard);
      if (indexes) indexes.push(index);
      else byShard.set(shard, [index]);
    });
    const receipts: EnqueueReceipt[] = new Array<EnqueueReceipt>(prepared.length);
    await Promise.all(
      [...byShard].map(async ([shard, indexes]) => {
        const shardReceipts = await this.enqueueShard(shard, indexes.map((index) => prepared[index]));
        indexes.forEach((index, i) => (receipts[index] = shardReceipts[i]));
      }),
    );
    return receipts;
  }

  /** The layout this producer enqueues a queue's tasks with (checked against Redis on first use). */
  layout(queue: string): QueueLayout | Promise<QueueLayout> {
    return this.layouts.layout(queue);
  }

  private async enqueueShard(keys: QueueKeys, prepared: Prepared[]): Promise<EnqueueReceipt[]> {
    if (prepared.length <= this.options.batchChunkSize) {
      return this.enqueueChunk(keys, prepared);
    }
    const receipts: EnqueueReceipt[] = [];
    for (let start = 0; start < prepared.length; start += this.options.batchChunkSize) {
      receipts.push(...(await this.enqueueChunk(keys, prepared.slice(start, start + this.options.batchChunkSize))));
    }
    return receipts;
  }

  /** The send() task `id` got its reply (or its caller stopped waiting): nothing to cancel any more. */
  forget(id: string): void {
    this.awaitingReply.delete(id);
  }

  /**
   * Removes a send() task whose caller gave up, if no worker has claimed it yet. Resolves true when it
   * was removed (it will not run), false when it was already claimed (it runs; nobody waits for it).
   */
  async cancel(id: string): Promise<boolean> {
    const waiting = this.awaitingReply.get(id);
    this.awaitingReply.delete(id);
    if (!waiting) return false;
    const { keys, task } = waiting;
    const removed = await scrubbed(
      this.redis.cancelTask(
        keys.pending(task.clientId),
        keys.priority(task.clientId),
        keys.delayed,
        task.dedupKey === undefined ? keys.ring : keys.dedup(task.dedupKey),
        keys.prioritized,
        task.entry,
        task.priority,
        task.dedupKey === undefined ? '' : task.id,
      ),
    );
    return removed === 1;
  }

  private async enqueueChunk(keys: QueueKeys, chunk: Prepared[]): Promise<EnqueueReceipt[]> {
    for (const task of chunk) {
      if (task.awaitsReply) this.awaitingReply.set(task.id, { keys, task });
    }
    const scriptKeys = new ScriptKeys([keys.ring, keys.delayed, keys.sequence, keys.ring, keys.prioritized, keys.groups, keys.faults]);
    const args: (string | number)[] = [keys.dueChannel, keys.root];
    for (const task of chunk) {
      args.push(
        ...scriptKeys.client(keys, task.clientId),
        task.clientId,
        task.entry,
        task.priority,
        task.delayMs,
        task.dedupKey === undefined ? NO_KEY : scriptKeys.indexOf(keys.dedup(task.dedupKey)),
        task.dedupTtlMs,
        task.id,
      );
    }
    const results = this.options.durability
      ? await this.enqueueReplicated(keys, chunk, scriptKeys, args, this.options.durability)
      : await this.redis.enqueueTasks(...(scriptKeys.args as [number]), ...args);
    return chunk.map((task, i) => {
      const holder = results[i];
      return holder === 0 || holder === undefined ? { id: task.id, duplicate: false } : { id: String(holder), duplicate: true };
    });
  }

  /**
   * The enqueue and a WAIT in one pipeline (one round trip): both go to the node holding the shard's
   * slot, and WAIT covers the writes made on that connection before it.
   */
  private async enqueueReplicated(
    keys: QueueKeys,
    chunk: Prepared[],
    scriptKeys: ScriptKeys,
    args: (string | number)[],
    { replicas, timeoutMs }: DurabilityOptions,
  ): Promise<(0 | string)[]> {
    const pipeline = this.redis.pipeline() as unknown as {
      enqueueTasks(...args: (string | number)[]): unknown;
      wait(replicas: number, timeout: number): unknown;
      exec(): Promise<[Error | null, unknown][] | null>;
    };
    pipeline.enqueueTasks(...scriptKeys.args, ...args);
    pipeline.wait(replicas, timeoutMs);
    const replies = await pipeline.exec();
    const [enqueueError, results] = replies?.[0] ?? [new Error('the enqueue pipeline was discarded'), undefined];
    if (enqueueError) {
      throw enqueueError;
    }
    const [waitError, acknowledged] = replies?.[1] ?? [new Error('the WAIT reply is missing'), 0];
    if (waitError) {
      throw waitError;
    }
    if (Number(acknowledged) < replicas) {
      throw new ReplicationTimeoutError(keys.queue, Number(acknowledged), replicas, timeoutMs, chunk.map((task) => task.id));
    }
    return results as (0 | string)[];
  }

  private prepare(item: EnqueueItem, now: number, index: number | undefined): Prepared {
    const fail = (message: string): never => {
      throw new InvalidTaskError(index === undefined ? message : `item ${index}: ${message} (nothing of the batch was enqueued)`, index);
    };
    const id = item.id ?? newTaskId();
    // The same rules for every item, whatever built it (a builder, a hand-made record, a plain payload).
    const clientProblem = nameProblem(item.clientId);
    if (clientProblem) {
      fail(`the client id ${clientProblem}, got ${describe(item.clientId)}`);
    }
    try {
      if (item.maxAttempts !== undefined) validateMaxAttempts('maxAttempts', item.maxAttempts, (field, message) => new Error(`${field} ${message}`));
      if (item.backoff !== undefined) validateBackoff('backoff', item.backoff, (field, message) => new Error(`${field} ${message}`));
    } catch (error) {
      fail((error as Error).message);
    }
    const priority = item.priority ?? 0;
    if (!Number.isSafeInteger(priority) || priority < 0 || priority > MAX_PRIORITY) {
      fail(`priority must be an integer from 0 to ${MAX_PRIORITY}, got ${String(priority)}`);
    }
    let delayMs = item.delayMs ?? 0;
    if (typeof delayMs !== 'number' || !Number.isFinite(delayMs) || delayMs < 0) {
      fail(`delay must be a non-negative number of milliseconds, got ${String(delayMs)}`);
    }
    if (item.runAt !== undefined) {
      if (typeof item.runAt !== 'number' || !Number.isFinite(item.runAt)) {
        fail(`runAt must be a time, got ${String(item.runAt)}`);
      }
      delayMs = Math.max(delayMs, item.runAt - now);
    }
    delayMs = Math.ceil(delayMs);
    if (delayMs > MAX_DELAY_MS) {
      fail(`the task would be due in ${Math.round(delayMs / 86_400_000)} days; the longest delay is ${MAX_DELAY_MS / 86_400_000} days`);
    }
    if (item.expiresAt !== undefined) {
      if (typeof item.expiresAt !== 'number' || !Number.isFinite(item.expiresAt)) {
        fail(`expiresAt must be a time, got ${String(item.expiresAt)}`);
      }
      if (item.expiresAt <= now) {
        fail(`the task expired before it was enqueued (expiresAt ${new Date(item.expiresAt).toISOString()} is in the past)`);
      }
      if (item.expiresAt <= now + delayMs) {
        fail('the task would expire before its delay ends');
      }
    }
    const dedupTtlMs = item.dedupTtlMs ?? this.options.dedupTtlMs;
    if (item.dedupKey !== undefined) {
      if (typeof item.dedupKey !== 'string' || item.dedupKey.length === 0 || item.dedupKey.length > MAX_DEDUP_KEY_LENGTH) {
        fail(`the deduplication key must be a string of 1 to ${MAX_DEDUP_KEY_LENGTH} characters, got ${describe(item.dedupKey)}`);
      }
      if (!Number.isSafeInteger(dedupTtlMs) || dedupTtlMs < 1) {
        fail(`the deduplication TTL must be a positive integer of milliseconds, got ${String(dedupTtlMs)}`);
      }
    }
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
        dedupKey: item.dedupKey,
      },
      this.serializePayload(item.payload, index),
    );
    return { id, clientId: item.clientId, entry, priority, delayMs, dedupKey: item.dedupKey, dedupTtlMs, awaitsReply: item.replyTo !== undefined };
  }

  private serializePayload(payload: unknown, index: number | undefined): string {
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
    const bytes = Buffer.byteLength(json);
    if (bytes > this.options.maxPayloadBytes) {
      throw new PayloadTooLargeError(bytes, this.options.maxPayloadBytes, index);
    }
    return json;
  }
}

interface Prepared {
  readonly id: string;
  readonly clientId: string;
  readonly entry: string;
  readonly priority: number;
  readonly delayMs: number;
  readonly dedupKey?: string;
  readonly dedupTtlMs: number;
  /** A send() task: kept until its reply comes, so its caller can cancel it. */
  readonly awaitsReply: boolean;
}
