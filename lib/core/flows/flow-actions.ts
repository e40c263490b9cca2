import { randomUUID } from 'node:crypto';
import type { BackoffOptions } from '../model/retry-policy.js';
import { MAX_TRACK_MS } from '../model/task-status.js';
import {
  FLOW_DEFAULT_KEEP_MS,
  FLOW_RECHECK_MS,
  flowCallbackId,
  flowGuard,
  flowTaskId,
  type FlowCallback,
  type FlowError,
  type FlowParentResult,
  type FlowSummary,
} from '../model/flow.js';
import { DECIDED_ENQUEUE_MS, SETTLED_GUARD_MS } from '../redis/call-record.js';
import { enqueueAnswer } from '../redis/gateway.js';
import type { FlowFold, FoldedParent } from '../redis/flow-gateway.js';
import type { FlowKeys, QueueKeys } from '../redis/keys.js';
import type { TaskStore } from '../redis/store.js';
import type { PreparedTask } from '../model/prepared-task.js';
import { prepareTask, type EnqueueItem } from '../producer/task-items.js';
import { errorMessage, type TaskLogger } from '../support/logger.js';

/**
 * How long a release or callback guard holds at most (ms) while its task is not on record as enqueued: past
 * any release made again after a crash (a reaper's due check, 30 s later, or its next sweep).
 */
const GUARD_MS = 7 * 86_400_000;
/** Most folds of one flow in one settle (each round does what the last answered; a stop may end the flow). */
const MAX_ROUNDS = 4;

/** A node as stored at creation (`specs` hash): where its task goes, and with what. */
export interface StoredNodeSpec {
  readonly pattern: string;
  readonly clientId: string;
  /** Its flow's `keepMs` (its task's index is kept as long). */
  readonly keepMs?: number;
  readonly maxAttempts?: number;
  readonly backoff?: BackoffOptions;
  readonly priority?: number;
  readonly payload?: unknown;
}

/**
 * What a fold of a flow answers is left to do, done: each released node enqueued (guarded: a fixed task id
 * and a deduplication key of the flow's generation, so a release made again, by a crash's successor or a
 * second process, is refused) and then marked enqueued; each node to stop (the flow failed or was
 * cancelled) stopped through its fence, or, when its release guard could be taken first, marked as never
 * to be enqueued; the completion callback enqueued once the flow ended (guarded the same way) and put on
 * record.
 */
export class FlowActions {
  constructor(
    private readonly store: TaskStore,
    private readonly logger?: TaskLogger,
    /** Folds a shard's flow events (a stopped node's cancel is heard at once, whoever works its pattern). */
    private readonly foldShard?: (queue: QueueKeys) => Promise<unknown>,
  ) {}

  /**
   * Folds `events` (seq, node, outcome, value per event) into flow `id` and does what is left; the flow's
   * generation (`created`), or undefined when it has no record.
   */
  async settle(id: string, events: readonly string[]): Promise<string | undefined> {
    const keys = this.store.keys.flow(id);
    let fold = await this.store.gateway.flow.fold(keys, events);
    for (let round = 1; fold.kind === 'flow'; round++) {
      const again = await this.act(keys, fold);
      if (!again || round >= MAX_ROUNDS) return fold.created;
      fold = await this.store.gateway.flow.fold(keys, []);
    }
    return undefined;
  }

  /** Folds flow `id` again and does what is left; whether it still has work a crash could cut off. */
  async pending(id: string): Promise<boolean> {
    const keys = this.store.keys.flow(id);
    const fold = await this.store.gateway.flow.fold(keys, []);
    if (fold.kind !== 'flow') return false;
    await this.act(keys, fold);
    const done = fold.ended !== '' && (fold.complete === undefined || fold.callback !== undefined);
    return !done || !fold.counted.includes('c') || !fold.counted.includes('e');
  }

  /**
   * Does what one fold answered; true when a stop changed the flow (a fold again may end it). Its enqueues go
   * under a deadline `DECIDED_ENQUEUE_MS` from when the fold was sent (`fold.asked`): none lands later, so a
   * guard kept `SETTLED_GUARD_MS` once its task is on record refuses each one from a process that folded before.
   */
  private async act(keys: FlowKeys, fold: FlowFold & { kind: 'flow' }): Promise<boolean> {
    const deadline = fold.asked + DECIDED_ENQUEUE_MS;
    const { redis, gateway } = this.store;
    await this.count(keys, fold);
    // table-ok: lives for one call
    const byShard = new Map<QueueKeys, PreparedTask[]>();
    for (const release of fold.releases) {
      const spec = JSON.parse(release.spec) as StoredNodeSpec;
      const parents = parentResults(release.parents);
      const item = nodeItem(keys.id, release.node, spec, parents, !this.store.redis.isCluster);
      const task = this.guarded(item, flowGuard(keys.id, fold.created, release.node));
      const shard = await this.shardOf(spec);
      byShard.set(shard, [...(byShard.get(shard) ?? []), task]);
    }
    // One enqueue call per shard for the releases of one fold (a diamond's two middle nodes in one call).
    const guards: string[] = [];
    for (const [shard, tasks] of byShard) guards.push(...(await this.enqueueAll(shard, tasks, deadline)));
    await gateway.flow.mark(
      keys,
      'released',
      fold.releases.map((release) => release.node),
    );
    // On record: no fold answers them again, so their guards need only outlast an enqueue on its way.
    for (const guard of guards) await redis.pexpire(guard, SETTLED_GUARD_MS);
    const gone: string[] = [];
    // table-ok: lives for one call
    const revoked = new Set<QueueKeys>();
    for (const stop of fold.stops) {
      const spec = JSON.parse(stop.spec) as StoredNodeSpec;
      const shard = await this.shardOf(spec);
      if (await this.stop(keys.id, fold, stop.node, stop.state, shard)) gone.push(stop.node);
      else revoked.add(shard);
    }
    const changed = (await gateway.flow.mark(keys, 'gone', gone)) > 0;
    for (const shard of revoked) await this.foldShard?.(shard);
    if (fold.ended !== '' && fold.complete !== undefined && fold.callback === undefined) {
      await this.complete(keys, fold, JSON.parse(fold.complete) as FlowCallback, deadline);
    }
    return changed;
  }

  /**
   * Counts the flow's creation, and its end once it ended, in the prefix's counters: each once however often
   * this runs (a marker per count, kept `keep` + 60 s: past a due check after a crash between the count and
   * its record), then on record on the flow (no fold answers it again).
   */
  private async count(keys: FlowKeys, fold: FlowFold & { kind: 'flow' }): Promise<void> {
    const ended = fold.ended !== '' && !fold.counted.includes('e');
    const letters = (fold.counted.includes('c') ? '' : 'c') + (ended ? 'e' : '');
    if (letters === '') return;
    const { keys: prefix, gateway } = this.store;
    const markerMs = fold.keep + 2 * FLOW_RECHECK_MS;
    for (const letter of letters as Iterable<'c' | 'e'>) {
      const marker = prefix.flowCounted(keys.id, fold.created, letter);
      await gateway.flow.count(prefix.flowCounters, marker, letter === 'c' ? 'created' : fold.state, markerMs);
    }
    await gateway.flow.recordCounted(keys, letters);
  }

  /**
   * Stops a released node of a flow that failed or was cancelled: true when it was not on record as enqueued
   * (`q`) and its release guard could be taken first (it was never enqueued, and now never will be); else its
   * task is cancelled by id through its fence (waiting: removed; running: its handler's signal aborts), and
   * its cancel comes back as an event.
   */
  private async stop(
    flow: string,
    fold: FlowFold & { kind: 'flow' },
    node: string,
    state: string,
    shard: QueueKeys,
  ): Promise<boolean> {
    if (state === 'q') {
      const guard = shard.dedup(flowGuard(flow, fold.created, node));
      if ((await this.store.redis.set(guard, 'stopped', 'PX', SETTLED_GUARD_MS, 'NX')) === 'OK') return true;
    }
    const answer = await this.store.gateway.track.revoke(
      shard,
      flowTaskId(flow, node),
      fold.reason.slice(0, 1_000),
      randomUUID(),
    );
    if (answer.outcome === 'cancelled' || answer.outcome === 'requested') {
      this.logger?.log(`flow ${flow}: node "${node}" stopped (${fold.state})`);
    }
    return false;
  }

  /** Enqueues the completion callback of an ended flow (exactly once: guarded), then puts it on record. */
  private async complete(
    keys: FlowKeys,
    fold: FlowFold & { kind: 'flow' },
    callback: FlowCallback,
    deadline: number,
  ): Promise<void> {
    const states = await this.store.redis.hgetall(keys.nodes);
    const count = (letter: string): string[] =>
      Object.entries(states)
        .filter(([, value]) => value.startsWith(`${letter}/`))
        .map(([node]) => node);
    const failedIds = count('d');
    const summary: FlowSummary = {
      flowId: keys.id,
      state: fold.state as FlowSummary['state'],
      ...(fold.reason === '' ? {} : { reason: fold.reason }),
      succeeded: count('s').length,
      failed: failedIds.length,
      cancelled: count('c').length,
      skipped: count('k').length,
      failedIds,
      ...(callback.payload === undefined ? {} : { payload: callback.payload }),
    };
    const taskId = flowCallbackId(keys.id);
    const item: EnqueueItem = { payload: summary, clientId: callback.clientId ?? 'default', id: taskId };
    let guard: string;
    try {
      guard = await this.enqueue(callback.pattern, item, `flow-complete:${keys.id}:${fold.created}`, deadline);
    } catch (error) {
      // Left off the record: the flow stays in the due index, and a later check enqueues it.
      this.logger?.error(`could not enqueue the completion callback of flow ${keys.id}: ${errorMessage(error)}`);
      throw error;
    }
    await this.store.gateway.flow.recordCallback(keys, taskId);
    await this.store.redis.pexpire(guard, SETTLED_GUARD_MS);
    this.logger?.log(`flow ${keys.id} ${fold.state}: enqueued ${taskId}`);
  }

  /** Enqueues one task under a guard of its own (not in its envelope: no settle frees it); the guard's key. */
  private async enqueue(pattern: string, item: EnqueueItem, guard: string, deadline: number): Promise<string> {
    const task = this.guarded(item, guard);
    const [key] = await this.enqueueAll(await this.shardOf({ pattern, clientId: task.clientId }), [task], deadline);
    return key;
  }

  /** A task prepared under its guard (a deduplication key not in its envelope: no settle frees it). */
  private guarded(item: EnqueueItem, guard: string): PreparedTask {
    const task = prepareTask(item, Date.now(), undefined, {
      maxPayloadBytes: Number.MAX_SAFE_INTEGER,
      deduplicationTtlMs: GUARD_MS,
    });
    return { ...task, deduplicationKey: guard, deduplicationTtlMs: GUARD_MS };
  }

  /**
   * Enqueues guarded tasks of one shard in one call (each refused alone if its guard is held), unless past
   * `deadline` (then nothing is written and it throws); their guards' keys.
   */
  private async enqueueAll(shard: QueueKeys, tasks: readonly PreparedTask[], deadline: number): Promise<string[]> {
    enqueueAnswer(
      await this.store.gateway.enqueue(shard, {
        deadline,
        timeoutMs: DECIDED_ENQUEUE_MS,
        batches: [{ tasks }],
      }),
    );
    return tasks.map((task) => shard.dedup(task.deduplicationKey as string));
  }

  private async shardOf(spec: Pick<StoredNodeSpec, 'pattern' | 'clientId'>): Promise<QueueKeys> {
    return (await this.store.layouts.layout(spec.pattern)).shardOf(spec.clientId);
  }
}

/**
 * A node's task as its flow enqueues it: a fixed id, tracked (its flow's stop cancels it by id), its index kept
 * as long as its flow's records. `fold` (a flow on one Redis server, not a Cluster): its success may release
 * its children in its own settle (see flow-templates.ts).
 */
export function nodeItem(
  flow: string,
  node: string,
  spec: StoredNodeSpec,
  parents: Record<string, FlowParentResult>,
  fold: boolean,
): EnqueueItem {
  return {
    payload: spec.payload ?? null,
    clientId: spec.clientId,
    id: flowTaskId(flow, node),
    flow,
    node,
    fold,
    parents,
    track: { keepMs: Math.min(spec.keepMs ?? FLOW_DEFAULT_KEEP_MS, MAX_TRACK_MS) },
    maxAttempts: spec.maxAttempts,
    backoff: spec.backoff,
    priority: spec.priority,
  };
}

/** The parents' outcomes as a child sees them (`ctx.parentResults()`), from what the fold answered. */
export function parentResults(parents: readonly FoldedParent[]): Record<string, FlowParentResult> {
  const results: Record<string, FlowParentResult> = {};
  for (const parent of parents) results[parent.id] = parentResult(parent);
  return results;
}

function parentResult(parent: FoldedParent): FlowParentResult {
  const stored = parseObject(parent.raw);
  if (parent.state === 's') {
    const err = stored?.err as FlowError | undefined;
    if (err && typeof err === 'object') return { state: 'succeeded', result: null, error: errorOf(err) };
    return { state: 'succeeded', result: stored?.response ?? null };
  }
  const state = parent.state === 'd' ? 'failed' : parent.state === 'k' ? 'skipped' : 'cancelled';
  const error = stored
    ? errorOf(stored as unknown as FlowError)
    : parent.raw === ''
      ? undefined
      : { message: parent.raw };
  return error ? { state, error } : { state };
}

function errorOf(value: FlowError): FlowError {
  const error: { -readonly [K in keyof FlowError]: FlowError[K] } = { message: String(value.message ?? '') };
  if (typeof value.name === 'string') error.name = value.name;
  if (typeof value.code === 'string') error.code = value.code;
  if (typeof value.reason === 'string') error.reason = value.reason;
  return error;
}

function parseObject(raw: string): Record<string, unknown> | undefined {
  if (raw === '') return undefined;
  try {
    const value: unknown = JSON.parse(raw);
    return typeof value === 'object' && value !== null && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}
