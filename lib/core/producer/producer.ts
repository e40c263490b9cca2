import { scrubbed } from '../support/redact.js';
import { describe } from '../support/describe.js';
import { patternProblem } from '../config/rules.js';
import { ClosedError, InvalidTaskError } from '../model/errors.js';
import type { QueueLayout } from '../redis/keys.js';
import type { QueueLayouts } from '../redis/layouts.js';
import type { TaskRedis } from '../redis/scripts.js';
import { EnqueueErrors } from './enqueue-errors.js';
import { EnqueueHandOver, receipt, shardKeyOf } from './hand-over.js';
import { KnownQueues } from './known-queues.js';
import { tracedBatch, tracedOne } from './producer-spans.js';
import { prepareTask, type EnqueueItem, type ItemLimits, type PreparedTask } from './task-items.js';
import type { EnqueueAnswer, EnqueueReceipt, ProducerOptions } from './producer-types.js';
import { relayedTasks, relayTasks, type RelayedTask } from './relay-enqueue.js';

export { newTaskId, type EnqueueItem } from './task-items.js';

export type { EnqueueAnswer, EnqueueReceipt, ProducerOptions } from './producer-types.js';

/**
 * Enqueues tasks durably: the promise resolves only once Redis has written them (and, with
 * `durability`, once enough replicas confirmed). Every item is checked before anything is sent, so
 * one invalid item fails only its own call. Calls made in one event-loop turn are coalesced into one
 * script call per shard (see EnqueueCoalescer); a caller's chunk of `batchChunkSize` items is never
 * split, so each stays all or nothing.
 */
export class TaskProducer {
  /** Queues whose layout is verified and which are recorded in the prefix's list of patterns. */
  private readonly known: KnownQueues;
  /** Calls waiting for the connection, each with how to fail it when the producer closes. */
  // table-ok: only calls made while the connection is not ready
  private readonly calls = new Set<(closed: Error) => void>();
  /** Whether the start-up checks passed (they run once per connection). */
  private checked = false;
  private readonly handOver: EnqueueHandOver;
  private readonly limits: ItemLimits;
  private readonly errors: EnqueueErrors;

  constructor(
    private readonly redis: TaskRedis,
    private readonly layouts: QueueLayouts,
    private readonly options: ProducerOptions,
  ) {
    this.known = new KnownQueues(redis, layouts, options.logger);
    this.limits = {
      maxPayloadBytes: options.maxPayloadBytes,
      deduplicationTtlMs: options.deduplicationTtlMs,
      track: options.track,
      outOfLineBytes: options.outOfLineBytes,
    };
    this.errors = new EnqueueErrors(layouts.prefix, options);
    this.handOver = new EnqueueHandOver(redis, options, this.errors);
  }

  /**
   * Fails every enqueue still waiting (the client is closing): with nothing sent, it is known not
   * written; with the write sent, it may have been.
   */
  close(): void {
    for (const fail of [...this.calls]) fail(new ClosedError('RedisTaskClient'));
    this.handOver.close();
  }

  /** One task; resolves with its receipt once Redis wrote it. */
  enqueueOne(queue: string, item: EnqueueItem): Promise<EnqueueReceipt> {
    return new Promise((written, failed) => this.enqueueOneTo(queue, item, { written, failed }));
  }

  /**
   * One task, answered through `to` exactly once: the hot path of `emit()` and `send()`, which make no
   * promise per call (each one a turn of the microtask queue between Redis's answer and the caller).
   */
  enqueueOneTo(queue: string, item: EnqueueItem, to: EnqueueAnswer, deadline?: number): void {
    const tracing = this.options.tracing;
    if (!tracing) return this.enqueueUntraced(queue, item, to, deadline);
    tracedOne(tracing, queue, item, to, (spanned, answer) => this.enqueueUntraced(queue, spanned, answer, deadline));
  }

  private enqueueUntraced(queue: string, item: EnqueueItem, to: EnqueueAnswer, deadline?: number): void {
    const layout = this.readyLayout(queue);
    if (layout === undefined) {
      this.enqueueItems(queue, [item], deadline).then(
        (receipts) => to.written(receipts[0]),
        (error: unknown) => to.failed(error),
      );
      return;
    }
    let task: PreparedTask;
    try {
      task = prepareTask(item, Date.now(), undefined, this.limits);
    } catch (error) {
      to.failed(error);
      return;
    }
    this.handOver.hand(
      layout.shardOf(shardKeyOf(task)),
      [task],
      (results, at) => to.written(receipt(task, results[at])),
      (error) => to.failed(error),
    );
  }

  /**
   * Enqueues within `enqueueTimeoutMs`: a connection that is down gets no command (known not written)
   * until it is ready again; a command sent whose answer does not come in time is reported as maybe
   * written. Either way the caller hears within the timeout, with the pattern and server named.
   */
  enqueue(queue: string, items: readonly EnqueueItem[], deadline?: number): Promise<EnqueueReceipt[]> {
    const tracing = this.options.tracing;
    return tracing && items.length > 0
      ? tracedBatch(tracing, queue, items, (traced) => this.enqueueItems(queue, traced, deadline))
      : this.enqueueItems(queue, items, deadline);
  }

  private async enqueueItems(
    queue: string,
    items: readonly EnqueueItem[],
    deadline?: number,
  ): Promise<EnqueueReceipt[]> {
    if (this.known.get(queue) === undefined) {
      const problem = patternProblem(queue);
      if (problem) throw new InvalidTaskError(`the pattern ${problem}, got ${describe(queue)}`);
    }
    if (items.length === 0) return [];
    const now = Date.now();
    const batch = items.length > 1;
    // Checked before anything else: one invalid item rejects the call with nothing sent.
    const prepared = items.map((item, index) => prepareTask(item, now, batch ? index : undefined, this.limits));
    const layout = this.readyLayout(queue);
    if (layout !== undefined) return this.handOver.submit(layout, prepared);
    return this.enqueueWhenReady(queue, prepared, deadline);
  }

  /** The queue's layout when nothing has to be waited for first (connection ready, checks done). */
  private readyLayout(queue: string): QueueLayout | undefined {
    return this.checked && this.redis.status === 'ready' ? this.known.get(queue) : undefined;
  }

  /** The first call of a queue, or one while the connection is down or unchecked: by `deadline` (the call's one deadline) or within enqueueTimeoutMs. */
  private async enqueueWhenReady(
    queue: string,
    prepared: PreparedTask[],
    deadline?: number,
  ): Promise<EnqueueReceipt[]> {
    let sent = false;
    let gaveUp = false;
    let fail!: (error: Error) => void;
    const failed = new Promise<never>((_, reject) => {
      fail = (error) => {
        gaveUp = true;
        reject(error);
      };
    });
    const timeoutMs = deadline === undefined ? this.options.enqueueTimeoutMs : Math.max(0, deadline - Date.now());
    const timer = setTimeout(() => fail(this.errors.unavailable(queue, sent ? 'unknown' : false)), timeoutMs);
    const onClose = (closed: Error) =>
      fail(sent ? this.errors.unavailable(queue, 'unknown', 'the client closed before Redis answered') : closed);
    this.calls.add(onClose);
    try {
      return await scrubbed(
        Promise.race([
          failed,
          (async () => {
            await this.options.watch.whenReady(timeoutMs + 1, this.errors.refusal).catch((error: unknown) => {
              const now = this.errors.notReady(error, queue); // where no wait will help: fail now
              if (now) fail(now);
              return failed;
            });
            // Once the caller was told "nothing was written" (timeout, close), nothing may be sent after all.
            if (gaveUp) return failed;
            await this.options.ready?.();
            this.checked = true;
            if (gaveUp) return failed;
            sent = true;
            return this.handOver.submit(await this.known.learn(queue), prepared);
          })(),
        ]),
      );
    } catch (error) {
      throw this.errors.mapped(error, queue);
    } finally {
      clearTimeout(timer);
      this.calls.delete(onClose);
    }
  }

  /**
   * The outbox relay's enqueue: each task under a call record named for it, so a row relayed again writes
   * nothing (see relay-enqueue.ts). Waits for the connection within enqueueTimeoutMs.
   */
  async relay(queue: string, tasks: readonly RelayedTask[], recordMs: number): Promise<void> {
    if (this.readyLayout(queue) === undefined) {
      await this.options.watch.whenReady(this.options.enqueueTimeoutMs, this.errors.refusal);
      await this.options.ready?.();
      this.checked = true;
    }
    const layout = this.known.get(queue) ?? (await this.known.learn(queue));
    await relayTasks(this.redis, layout, tasks, recordMs, this.options);
  }

  /** The rows of relayed tasks are deleted for good: their records may go soon. */
  relayed(queue: string, tasks: readonly RelayedTask[]): void {
    const layout = this.known.get(queue);
    if (layout) relayedTasks(this.redis, layout, tasks);
  }

  /** The layout this producer enqueues a queue's tasks with (checked against Redis on first use). */
  layout(queue: string): QueueLayout | Promise<QueueLayout> {
    return this.layouts.layout(queue);
  }
}
