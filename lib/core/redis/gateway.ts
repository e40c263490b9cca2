import type { PrefixKeys, QueueKeys, TrackedKeys } from './keys.js';
import { perConnection } from './per-connection.js';
import { Cluster } from 'ioredis';
import { pushEnqueueFields, startEnqueueCall } from './enqueue-fields.js';
import { ScriptKeys, settleKeys } from './script-keys.js';
import { TrackGateway } from './track-gateway.js';
import { ScheduleGateway } from './schedule-gateway.js';
import { BatchGateway } from './batch-gateway.js';
import { FlowGateway } from './flow-gateway.js';
import { SweepGateway } from './sweep-gateway.js';
import { StepGateway } from './step-gateway.js';
import { afterBodies } from './bodies.js';
import type { TaskRedis } from './scripts.js';
import { sleep } from '../support/logger.js';
import type { AckItem, PreparedTask } from '../model/prepared-task.js';

/**
 * The one way into the Lua scripts: a method per script that names its own KEYS from the queue's keys
 * (in the order its `.lua` header states; nobody else knows that order) and answers with tagged results
 * instead of the scripts' sentinel numbers. Each method's script is named in its comment.
 */
export class ScriptGateway {
  /** The scripts of tracked tasks (start, cancel, progress), batches (open, add, seal, fold, close), flows (open, fold,
   * mark, cancel), schedules (change, claim, advance, a tick's enqueue), the sweep, durable steps (load, fenced save). */
  readonly track: TrackGateway;
  readonly batch: BatchGateway;
  readonly flow: FlowGateway;
  readonly schedules: ScheduleGateway;
  readonly sweeps: SweepGateway;
  readonly steps: StepGateway;

  constructor(private readonly redis: TaskRedis) {
    this.track = new TrackGateway(redis);
    this.batch = new BatchGateway(redis);
    this.flow = new FlowGateway(redis);
    this.schedules = new ScheduleGateway(redis);
    this.sweeps = new SweepGateway(redis);
    this.steps = new StepGateway(redis);
  }

  /**
   * enqueueTasks: the call's tasks, batch by batch, behind its call record (which makes a resend
   * idempotent); per task 0 (written) or the id holding its deduplication key; -1 when the call was written
   * after its deadline (again, or first once a reconnection let it go) and no answer was on record (the
   * script's mode '3': nothing was written by that send). Read it with `enqueueAnswer`.
   */
  enqueue(keys: QueueKeys, call: EnqueueCall): Promise<(0 | string)[] | -1> {
    // Out-of-line payloads stored just before it; else no promise of its own here (once per emit).
    return afterBodies(this.redis, keys, call.batches, () => this.redis.enqueueTasks(keys.root, ...enqueueArgs(call)));
  }

  /** The enqueue and a WAIT in one pipeline (one round trip, both on the node of the shard's slot). */
  async enqueueReplicated(
    keys: QueueKeys,
    call: EnqueueCall,
    { replicas, timeoutMs }: { readonly replicas: number; readonly timeoutMs: number },
  ): Promise<Replicated> {
    // Out-of-line payloads stored just before it: the WAIT after the call covers them too (one connection).
    const [results, acknowledged] = await afterBodies(this.redis, keys, call.batches, () =>
      enqueueAndWait(this.redis, keys, enqueueArgs(call), replicas, timeoutMs),
    );
    const written = enqueueAnswer(results);
    return acknowledged < replicas
      ? { kind: 'short', results: written, acknowledged }
      : { kind: 'replicated', results: written };
  }

  /** claimTasks: acknowledges `acks` (fenced), then claims up to `wanted` tasks for the worker. */
  async claim(keys: QueueKeys, request: ClaimRequest): Promise<ClaimReply> {
    // One key, the base: the script names the others from it (the smallest request per wake-up).
    const [lost, claimed, throttledUntil, drained, started = [], keeps = []] = await this.redis.claimTasks(
      keys.base,
      request.wanted,
      request.workerId,
      request.clientConcurrency,
      request.tokenPrefix,
      request.leaseMs,
      ...request.acks,
    );
    return {
      lost,
      outcome: claimOutcome(claimed),
      throttledUntil: throttledUntil > 0 ? throttledUntil : undefined,
      drained: drained === 1,
      started,
      keeps,
    };
  }

  /** ackTasks: per acknowledgement, true when removed, false when the worker no longer held it. */
  async acknowledge(keys: QueueKeys, workerId: string, acks: readonly AckItem[]): Promise<boolean[]> {
    const k = keys;
    const fields: (string | number)[] = [];
    for (const ack of acks) pushAckFields(fields, ack);
    const results = await this.redis.ackTasks(k.processing(workerId), ...settleKeys(k), ...fields);
    return results.map((held) => held === 1);
  }

  /** retryTask: the task due after `delayMs` (Redis clock); `counts`: `attempt` (a failed attempt, counted), `step`
   * (a durable step's own retry: not counted), `yield` (given back at a step boundary: neither). */
  async retry(
    keys: QueueKeys,
    workerId: string,
    token: string,
    delayMs: number,
    /** A tracked task's keys: its index becomes `delayed`, its entry key holds the new entry. */
    tracked?: TrackedKeys,
    counts: 'attempt' | 'step' | 'yield' = 'attempt',
  ): Promise<{ kind: 'scheduled'; dueAt: number } | { kind: 'replaced' } | Lost> {
    const due = await this.redis.retryTask(
      keys.processing(workerId),
      keys.delayed,
      ...settleKeys(keys),
      token,
      delayMs,
      tracked?.index ?? '',
      tracked?.entry ?? '',
      counts,
    );
    // -1: a task with a coalescing key whose key has a newer task: not retried (it left the worker).
    return due === 0 ? LOST : due === -1 ? { kind: 'replaced' } : { kind: 'scheduled', dueAt: due };
  }

  /** deadLetterTask: the held task's record (JSON) to dead letters, its deduplication key freed, its caller answered. */
  async deadLetter(keys: QueueKeys, workerId: string, token: string, letter: DeadLetterWrite): Promise<boolean> {
    const { deduplicationKey, taskId, reply } = letter;
    const settled = await this.redis.deadLetterTask(
      keys.processing(workerId),
      keys.deadLetters,
      keys.result(taskId ?? 'unknown'),
      deduplicationKey === undefined ? keys.ring : keys.dedup(deduplicationKey),
      ...settleKeys(keys),
      token,
      letter.record,
      letter.cap,
      deduplicationKey === undefined ? '' : (taskId ?? ''),
      letter.tracked?.index ?? '',
      letter.tracked?.entry ?? '',
      ...(reply ? [reply.channel, reply.message, reply.ttlMs] : []),
    );
    return settled === 1;
  }

  /** requeueTasks: held tasks back to the heads of their clients' lists; how many went back. With `expiredBy` (a
   * reaper's recovery), nothing moves unless the worker's lease still ends by then: -1 when it renewed it (alive). */
  requeue(
    keys: QueueKeys,
    workerId: string,
    countAttempt: boolean,
    tasks: readonly HeldTask[],
    expiredBy?: number,
  ): Promise<number> {
    const fixed = [keys.processing(workerId), keys.ring, keys.sequence, keys.prioritized, keys.counted];
    fixed.push(keys.inflight, keys.parked, keys.faults, keys.pendingCount, keys.workers, keys.base, keys.root);
    const call = clientArgs(
      keys,
      fixed,
      tasks,
      (task) => [task.token],
      (task) => [task.priority, task.tracked?.index ?? '', task.tracked?.entry ?? ''],
    );
    const expiry = expiredBy === undefined ? ['', 0] : [workerId, expiredBy];
    return this.redis.requeueTasks(...(call.keys as [number]), countAttempt ? 1 : 0, ...expiry, ...call.fields);
  }

  /** promoteTasks: due delayed entries to their clients' lists; how many were promoted. */
  promote(keys: QueueKeys, tasks: readonly { entry: string; clientId: string; priority: number }[]): Promise<number> {
    const fixed = [keys.delayed, keys.ring, keys.sequence, keys.prioritized, keys.faults, keys.pendingCount];
    const args = clientArgs(
      keys,
      fixed,
      tasks,
      (task) => [task.entry],
      (task) => [task.priority],
    );
    return this.redis.promoteTasks(...(args.keys as [number]), ...args.fields);
  }

  /** deadLetterDelayed: an entry of the delayed set that cannot run, to dead letters (once); false when already gone. */
  async deadLetterDelayed(keys: QueueKeys, entry: string, record: string, cap: number): Promise<boolean> {
    const { delayed, deadLetters, counters, base, root } = keys;
    return (await this.redis.deadLetterDelayed(delayed, deadLetters, counters, base, root, entry, record, cap)) === 1;
  }

  /** requeueDeadLetters: each record (as stored) replaced by a fresh entry on its client's list. */
  requeueDeadLetters(keys: QueueKeys, letters: readonly RequeuedLetter[]): Promise<number> {
    const fixed = [keys.deadLetters, keys.ring, keys.sequence, keys.prioritized, keys.faults, keys.pendingCount];
    fixed.push(keys.base, keys.root);
    const args = clientArgs(
      keys,
      fixed,
      letters,
      (letter) => [letter.raw],
      (letter) => [letter.entry, letter.priority, letter.tracked?.index ?? '', letter.tracked?.entry ?? ''],
    );
    return this.redis.requeueDeadLetters(...(args.keys as [number]), ...args.fields);
  }

  /** heartbeatWorker: renews the lease; `running` tokens the hash lost, and held tokens nothing runs. */
  async heartbeat(
    keys: QueueKeys,
    workerId: string,
    leaseMs: number | IdleLease,
    running: readonly string[] = [],
  ): Promise<Heartbeat> {
    const [now, lost, orphaned] = await this.redis.heartbeatWorker(
      keys.workers,
      keys.processing(workerId),
      keys.heartbeats,
      keys.faults,
      workerId,
      typeof leaseMs === 'number' ? leaseMs : `${leaseMs.idle}/${leaseMs.held}`,
      ...running,
    );
    return { now, lost, orphaned };
  }

  /** forgetWorker: true when removed; false when it renewed its lease since, or still holds tasks. */
  async forgetWorker(keys: QueueKeys, workerId: string, expiredBy: number): Promise<boolean> {
    const { workers, heartbeats } = keys;
    return (await this.redis.forgetWorker(workers, keys.processing(workerId), heartbeats, workerId, expiredBy)) === 1;
  }

  /** releaseLock: the reaper's lock of the shard, if `owner` still holds it. */
  async releaseReaperLock(keys: QueueKeys, owner: string): Promise<boolean> {
    return (await this.redis.releaseLock(keys.reaperLock, owner)) === 1;
  }

  /** releaseThrottled: rate-limited clients whose next token is due back on the ring. */
  async releaseThrottled(keys: QueueKeys, now: number): Promise<{ released: number; nextDueAt?: number }> {
    const [released, nextDue] = await this.redis.releaseThrottled(keys.throttled, keys.ring, now);
    return nextDue > 0 ? { released, nextDueAt: nextDue } : { released };
  }

  /** snapshotCounters: the outcome counters recorded for the current minute; false when already recorded. */
  async snapshotCounters(keys: QueueKeys): Promise<boolean> {
    return (await this.redis.snapshotCounters(keys.counters, keys.history)) === 1;
  }

  /** readOverview: what the dashboard shows of a shard, per consumer group, in one read-only call (see its header). */
  readOverview(keys: QueueKeys, sample: number): Promise<unknown[]> {
    return this.redis.readOverview(keys.root, sample);
  }

  /** recordShardCount: the queue's shard count on record (`count` recorded when there is none). */
  recordShardCount(prefix: PrefixKeys, queue: string, count: number): Promise<number> {
    const unsharded = prefix.queue(queue);
    return this.redis.recordShardCount(
      prefix.shardCount(queue),
      unsharded.ring,
      unsharded.delayed,
      unsharded.workers,
      count,
    );
  }

  /** rejoinClient: a client with pending tasks that nothing can reach back on the ring; how many tasks it has (0: it was in reach). */
  rejoinClient(keys: QueueKeys, clientId: string): Promise<number> {
    return this.redis.rejoinClient(
      keys.ring,
      keys.parked,
      keys.throttled,
      keys.pending(clientId),
      keys.priority(clientId),
      keys.pendingCount,
      keys.faults,
      clientId,
    );
  }
}

/**
 * A variable-key call whose items each land on a client's list: `numkeys` and the keys (the fixed ones,
 * then every client's list and priority set once), and the fields: per item its `lead` fields, its client's two
 * KEYS indexes, the client id and its `rest` fields (the `pushTask` helper's layout, as the headers state).
 */
function clientArgs<T extends { readonly clientId: string }>(
  keys: QueueKeys,
  fixed: readonly string[],
  items: readonly T[],
  lead: (item: T) => (string | number)[],
  rest: (item: T) => (string | number)[],
): { keys: (string | number)[]; fields: (string | number)[] } {
  const scriptKeys = new ScriptKeys(fixed);
  const fields: (string | number)[] = [];
  for (const item of items)
    fields.push(...lead(item), ...scriptKeys.client(keys, item.clientId), item.clientId, ...rest(item));
  return { keys: scriptKeys.args, fields };
}

/** A node's answer that it did not run the command: the slot is served elsewhere (moved, failed over). */
const REDIRECTED = /^(MOVED|ASK) /;
/**
 * How long an enqueue redirected that way is sent again (each time after the slot map was read again), at
 * most: a failover's new map reaches every node within a few hundred milliseconds.
 */
const ENQUEUE_REDIRECTS_MS = 3_000;

/**
 * The enqueue and a WAIT as one pipeline: the script's answer, and how many replicas acknowledged. On a
 * Cluster, a pipeline whose enqueue was redirected (MOVED, ASK: the script did not run) while its WAIT
 * answered is not followed by ioredis (it follows a pipeline only when every command was redirected
 * alike): the slot map is read again and the pipeline sent again, to the node that serves the slot now.
 */
async function enqueueAndWait(
  redis: TaskRedis,
  keys: QueueKeys,
  args: (string | number)[],
  replicas: number,
  timeoutMs: number,
): Promise<[(0 | string)[] | -1, number]> {
  const until = Date.now() + Math.min(timeoutMs, ENQUEUE_REDIRECTS_MS);
  for (let redirects = 0; ; redirects++) {
    try {
      return await enqueueAndWaitOnce(redis, keys, args, replicas, timeoutMs);
    } catch (error) {
      const redirected = error instanceof Error && REDIRECTED.test(error.message);
      if (!redirected || !(redis instanceof Cluster) || Date.now() >= until) throw error;
      // Right after a failover the node asked for the slot map may not know yet: read it again after a
      // pause that doubles (10 ms, 20 ms, ... at most 200 ms), until the node the map names takes the call.
      if (redirects > 0) await sleep(Math.min(200, 10 * 2 ** (redirects - 1)));
      await new Promise<void>((resolve) => redis.refreshSlotsCache(() => resolve()));
    }
  }
}

async function enqueueAndWaitOnce(
  redis: TaskRedis,
  keys: QueueKeys,
  args: (string | number)[],
  replicas: number,
  timeoutMs: number,
): Promise<[(0 | string)[] | -1, number]> {
  const pipeline = redis.pipeline() as unknown as {
    enqueueTasks(root: string, ...args: (string | number)[]): unknown;
    wait(replicas: number, timeout: number): unknown;
    exec(): Promise<[Error | null, unknown][] | null>;
  };
  pipeline.enqueueTasks(keys.root, ...args);
  pipeline.wait(replicas, timeoutMs);
  const replies = await pipeline.exec();
  const [enqueueError, results] = replies?.[0] ?? [new Error('the enqueue pipeline was discarded'), undefined];
  if (enqueueError) throw enqueueError;
  const [waitError, acknowledged] = replies?.[1] ?? [new Error('the WAIT reply is missing'), 0];
  if (waitError) throw waitError;
  return [results as (0 | string)[] | -1, Number(acknowledged)];
}

/** What claimTasks' second reply stands for: -1 the worker is not registered, -2 the queue is paused, else the claimed pairs. */
function claimOutcome(claimed: -1 | -2 | string[]): ClaimOutcome {
  return claimed === -1
    ? { kind: 'unregistered' }
    : claimed === -2
      ? { kind: 'paused' }
      : { kind: 'claimed', pairs: claimed };
}

/** One enqueue call: the caller's deadline (its call record carries it) and its tasks, batch by batch. */
export interface EnqueueCall {
  /** When the caller stops waiting (ms since the epoch): a resend after it writes nothing new. */
  readonly deadline: number;
  /** The caller's wait (`enqueueTimeoutMs`): the call record is kept this long and a margin. */
  readonly timeoutMs: number;
  /** Each batch stays whole within the call (all or nothing), in call order. */
  readonly batches: readonly { readonly tasks: readonly PreparedTask[] }[];
}

/** The enqueue script's arguments: the call record, then each task's fields (see `pushEnqueueFields`). */
function enqueueArgs(call: EnqueueCall): (string | number)[] {
  const args: (string | number)[] = [];
  startEnqueueCall(args, call.deadline, call.timeoutMs);
  for (const batch of call.batches) for (const task of batch.tasks) pushEnqueueFields(args, task);
  return args;
}

/**
 * One acknowledgement's 7 fields for ackTasks-8.lua: token, task id, deduplication key ('' none), reply
 * channel ('' not a send() task), reply message ('' none), result TTL (ms), index key ('' untracked).
 */
export function pushAckFields(args: (string | number)[], ack: AckItem): void {
  args.push(
    ack.token,
    ack.taskId,
    ack.deduplicationKey ?? '',
    ack.reply?.channel ?? '',
    ack.reply?.message ?? '',
    ack.resultTtlMs,
    ack.tracked?.index ?? '',
  );
}

const LOST: Lost = { kind: 'lost' };

/** The worker no longer holds the task (its lease was lost): nothing was changed. */
export interface Lost {
  readonly kind: 'lost';
}

export type Replicated =
  | { readonly kind: 'replicated'; readonly results: (0 | string)[] }
  /** Written, but fewer replicas than asked confirmed it in time. */
  | { readonly kind: 'short'; readonly results: (0 | string)[]; readonly acknowledged: number };

/** A lease for a shard where the worker holds no task: `idle` if its processing hash is empty, else `held` (ms). */
export interface IdleLease {
  readonly idle: number;
  readonly held: number;
}

export interface ClaimRequest {
  readonly workerId: string;
  /** Most tasks to claim (0: only acknowledge). */
  readonly wanted: number;
  /** Per-client cap on tasks in flight (0: none). */
  readonly clientConcurrency: number;
  /** Unique to this call (see ClaimLoop). */
  readonly tokenPrefix: string;
  /** The lease of a worker holding tasks (ms): a claim under a longer (idle) lease cuts it to this. */
  readonly leaseMs: number;
  /**
   * Succeeded tasks to acknowledge (no trait that settles on its own): each its token, or for a tracked task
   * `<token>\t<task id>` (its index becomes `completed` in the call).
   */
  readonly acks: readonly string[];
}

export type ClaimOutcome =
  /** `pairs`: token, encoded entry, token, entry, ... (flat: the hot path allocates no object per task). */
  | { readonly kind: 'claimed'; readonly pairs: readonly string[] }
  /** The worker's lease is not on record (expired and forgotten): register again, then claim. */
  | { readonly kind: 'unregistered' }
  /** The queue is paused: nothing claimed (acknowledgements still went through). */
  | { readonly kind: 'paused' };

export interface ClaimReply {
  /** Acknowledged tokens the worker no longer held. */
  readonly lost: readonly string[];
  readonly outcome: ClaimOutcome;
  /** A rate-limited client left the ring: when its next token is due (Redis time, ms). */
  readonly throttledUntil?: number;
  /** No client was left waiting when the claim ended: another claim now would find nothing. */
  readonly drained: boolean;
  /**
   * The places (1-based, rising) of the claimed tasks the claim recorded running (tracked ones: their handler
   * starts without a startTasks call).
   */
  readonly started: readonly number[];
  /**
   * The `keep` (ms, as its index holds it; '' when that is not a positive integer) of each task in `started`, in
   * the same order: the worker sends it back with the task's success, which then needs no read of the index.
   */
  readonly keeps?: readonly string[];
}

/** A dead letter given a fresh run: its record as stored, its fresh entry, and its tracked keys when it was tracked. */
export interface RequeuedLetter {
  readonly raw: string;
  readonly clientId: string;
  readonly entry: string;
  readonly priority: number;
  readonly tracked?: TrackedKeys;
}

export interface DeadLetterWrite {
  /** The dead-letter record, JSON. */
  readonly record: string;
  /** Most dead letters kept. */
  readonly cap: number;
  readonly taskId?: string;
  /** The deduplication key the task holds, freed with it. */
  readonly deduplicationKey?: string;
  /** An error reply to a send() caller. */
  readonly reply?: { readonly channel: string; readonly message: string; readonly ttlMs: number };
  /** A tracked task's keys: its index becomes `dead`. */
  readonly tracked?: TrackedKeys;
}

/** A task held in a processing hash, going back to its client's list. */
export interface HeldTask {
  readonly token: string;
  readonly clientId: string;
  readonly priority: number;
  /** A tracked task's keys: its index becomes `pending` again, its entry key holds the returned entry. */
  readonly tracked?: TrackedKeys;
}

export interface Heartbeat {
  /** Redis time (ms). */
  readonly now: number;
  readonly lost: string[];
  readonly orphaned: string[];
}

/**
 * What each role asks of the gateway, by name: a role takes only its part, so a unit test's fake implements
 * exactly that part (no cast).
 */
export type EnqueueCalls = Pick<ScriptGateway, 'enqueue' | 'enqueueReplicated'>;
/** The lease's part: heartbeats. */
export type HeartbeatCalls = Pick<ScriptGateway, 'heartbeat'>;
/** A claimed task's part: its settles, its renewal, and the steps of a tracked or coalesced task. */
export type ClaimedTaskCalls = Pick<ScriptGateway, 'retry' | 'deadLetter' | 'heartbeat'> & {
  readonly track: Pick<TrackGateway, 'start' | 'startCoalesced' | 'progress'>;
  readonly steps: Pick<StepGateway, 'load' | 'save'>;
};

/** The gateway of a connection (scripts are defined per connection). */
export const gatewayOf = perConnection((redis) => new ScriptGateway(redis));

/** An enqueue call's results, or the error of a send after the deadline that found no answer on record. */
export function enqueueAnswer(results: (0 | string)[] | -1): (0 | string)[] {
  if (Array.isArray(results)) return results;
  throw new Error(
    'the enqueue call reached Redis after its deadline (it waited for a reconnection) and found no record of an earlier send; it wrote nothing',
  );
}
