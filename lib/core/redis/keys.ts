import { fnv1a, hashSlot, SLOT_COUNT } from './hash-slot.js';

/** The implicit consumer group: its keys are the pattern's own (as before groups existed). */
export const DEFAULT_GROUP = 'default';

/** Most shards one queue may be spread over. */
export const MAX_SHARDS = 256;

/**
 * The one place that spells Redis key names.
 *
 * Every key and channel starts with the prefix and `:`, outside any hash tag, so one ACL pattern
 * (`~prefix:*`, `&prefix:*`) covers a whole deployment. Every key of a queue (of one shard of a
 * queue, when it is sharded) then carries one hash tag, so all of them live in one Redis Cluster slot
 * and every Lua script touches one slot. An unsharded queue's keys start `prefix:{queue}`; shard k of
 * N has `prefix:{queue%sk.j}`, where j is the first number that puts the tag's slot in the k-th of N
 * equal ranges of the slot space, so N shards land on N different primaries of a cluster whose slots
 * are split evenly (as `redis-cli --cluster create` does). The queue name is a Nest pattern; `%`, `{`
 * and `}` in it are percent-encoded, so a pattern can never move its keys to another slot, and `%s`
 * never occurs in an encoded name.
 */
export class QueueKeys {
  /** The hash tag shared by every key of this queue (shard), e.g. `{avatar.resize}`. */
  readonly tag: string;
  /** Where every key of this queue (shard) starts: the prefix, `:`, then the tag. */
  readonly root: string;
  /** The Redis Cluster slot of every key of this queue (shard). */
  readonly slot: number;
  /** Clients that have pending tasks, rotated round-robin by claims (list of client ids). */
  readonly ring: string;
  /** Workers consuming this queue, scored by their lease expiry (sorted set, Redis time in ms). */
  readonly workers: string;
  /** Fencing-token counter: every claim gets a fresh, never reused token (string counter). */
  readonly sequence: string;
  /** Dead letters, newest first, capped (list of JSON records). */
  readonly deadLetters: string;
  /** Tasks waiting for a later time: retries after backoff (sorted set: entry -> due ms, Redis time). */
  readonly delayed: string;
  /** How many pending tasks sit in priority sets (string counter; claims skip priority sets at 0). */
  readonly prioritized: string;
  /**
   * How many tasks are pending in the shard, all clients together (string counter, kept by every script
   * that adds or takes pending tasks), so stats and the dashboard read the depth in O(1).
   */
  readonly pendingCount: string;
  /**
   * Set (Redis ms) by a claim that found the pending count above what any client in reach held and set it
   * right: some client may be stranded off the ring, so the ring audit passes over the shard's keys (string).
   */
  readonly auditWanted: string;
  /**
   * The outcome counters as they stood at each minute of the last hour (hash: minute since the epoch ->
   * "<Redis ms> <completed> <failed> <retried> <deadLettered>"), for per-minute rates.
   */
  readonly history: string;
  /** The per-client concurrency cap the pattern's workers use (string; absent: none), for the dashboard. */
  readonly clientConcurrency: string;
  /** Tasks claimed under a per-client cap (hash: fencing token -> client id). */
  readonly counted: string;
  /** Tasks of each client in flight under a per-client cap (hash: client id -> count). */
  readonly inflight: string;
  /** Clients taken off the ring at their cap, until one of their tasks leaves a worker (set). */
  readonly parked: string;
  /** Held by the process recovering dead workers of this queue, so reapers do not stampede (string). */
  readonly reaperLock: string;
  /** While it exists, workers claim nothing from this queue; producers still enqueue (string). */
  readonly paused: string;
  /** Outcomes so far: completed, failed, retried, deadLettered (hash: outcome -> count). */
  readonly counters: string;
  /** Clients' claim weights, where not 1 (hash: client id -> weight). */
  readonly weights: string;
  /** Tasks a client has taken in the weighted visit under way (hash: client id -> count). */
  readonly credit: string;
  /** When each worker last renewed its lease (hash: worker id -> Redis time in ms). */
  readonly heartbeats: string;
  /** Rate limits: tasks started per second (hash: client id, or '*' for every client, -> rate; 0 none). */
  readonly rates: string;
  /** Rate-limited clients off the ring until their next token is due (sorted set: client -> due ms). */
  readonly throttled: string;
  /** Rate-limited clients' token buckets (hash: client id -> "tokens:last refill ms"). */
  readonly buckets: string;
  /**
   * Broken data the scripts found and what they did about it: a client key of the wrong type
   * (quarantined), a weight or count that is not a number (hash: subject -> "<ms> <what>").
   */
  readonly faults: string;

  /**
   * Where this consumer group's keys start: the root itself for the implicit group `default`, else
   * `<root>:g:<group>` (same hash tag, so every group of a pattern shard shares one slot).
   */
  readonly base: string;
  /** Consumer groups registered on this pattern shard: each gets a copy of every task (set of names). */
  readonly groups: string;

  constructor(
    readonly prefix: string,
    readonly queue: string,
    /** This shard's index (0 for an unsharded queue). */
    readonly shard = 0,
    /** How many shards the queue is spread over. */
    readonly shardCount = 1,
    /** The consumer group whose copies these keys hold. */
    readonly group = DEFAULT_GROUP,
  ) {
    this.tag = shardTag(queue, shard, shardCount);
    this.root = `${prefix}:${this.tag}`;
    this.slot = hashSlot(this.tag);
    this.base = group === DEFAULT_GROUP ? this.root : `${this.root}:g:${group}`;
    this.groups = `${this.root}:groups`;
    this.ring = `${this.base}:ring`;
    this.workers = `${this.base}:workers`;
    this.sequence = `${this.base}:sequence`;
    this.deadLetters = `${this.base}:dead`;
    this.delayed = `${this.base}:delayed`;
    this.reaperLock = `${this.base}:reaper-lock`;
    this.prioritized = `${this.base}:prioritized`;
    this.pendingCount = `${this.base}:pending-count`;
    this.auditWanted = `${this.base}:audit-wanted`;
    this.history = `${this.base}:history`;
    this.clientConcurrency = `${this.base}:client-concurrency`;
    this.counted = `${this.base}:counted`;
    this.inflight = `${this.base}:inflight`;
    this.parked = `${this.base}:parked`;
    this.paused = `${this.base}:paused`;
    this.counters = `${this.base}:counters`;
    this.weights = `${this.base}:weights`;
    this.credit = `${this.base}:credit`;
    this.rates = `${this.base}:rates`;
    this.heartbeats = `${this.base}:heartbeats`;
    this.throttled = `${this.base}:throttled`;
    this.buckets = `${this.base}:buckets`;
    this.faults = `${this.base}:faults`;
  }

  /**
   * Pending tasks of one client, oldest first (list of encoded entries). With an empty client id, the
   * prefix the claim script completes with the client ids it takes from the ring (same hash tag).
   */
  pending(clientId: string): string {
    return `${this.base}:pending:${clientId}`;
  }

  /**
   * Pending tasks of one client that have a priority (sorted set: 15-digit sequence + encoded entry ->
   * -priority; claims take these before the client's plain list).
   */
  priority(clientId: string): string {
    return `${this.base}:priority:${clientId}`;
  }

  /** Held by the live task with this deduplication key (string: task id, with a TTL). */
  dedup(key: string): string {
    return `${this.root}:dedup:${key}`;
  }

  /**
   * What one enqueue call answered, or a connection's mark (a `~` session; call-sequence.ts): a call ioredis
   * sends again after a reconnection (its reply lost) answers from them, instead of writing its tasks twice.
   */
  call(callId: string): string {
    return `${this.root}:call:${callId}`;
  }

  /** The same shard's keys for another consumer group. */
  forGroup(group: string): QueueKeys {
    return group === this.group ? this : new QueueKeys(this.prefix, this.queue, this.shard, this.shardCount, group);
  }

  /** The pub/sub channel told the due time of a delayed task that became the queue's earliest. */
  get dueChannel(): string {
    return `${this.root}:due`;
  }

  /**
   * The pub/sub channel on which idle workers hear that the shard has work again (a client went onto its
   * empty ring; include/guard.lua's wakeWorkers names it from the ring: `<base>:wake`).
   */
  get wakeChannel(): string {
    return `${this.base}:wake`;
  }

  /**
   * The shard's bell (list holding at most one token): an idle worker process blocks on it (BLPOP), and each
   * token wakes one of them (include/guard.lua's ringBell; rung with the wake message, and by a claim that
   * leaves work behind).
   */
  get bell(): string {
    return `${this.base}:bell`;
  }

  /** The pub/sub channel on which workers hear that the queue was resumed. */
  get controlChannel(): string {
    return `${this.base}:control`;
  }

  /** Tasks one worker has claimed and not yet settled (hash: fencing token -> encoded entry). */
  processing(workerId: string): string {
    return `${this.base}:processing:${workerId}`;
  }

  /**
   * A tracked task's index (hash: state, where it waits or which worker runs it, progress, outcome; see
   * scripts/include/track.lua), with a TTL: made by the enqueue of a tracked task only, updated by every
   * later step while it exists. One per consumer group (each group's copy has its own life).
   */
  task(taskId: string): string {
    return `${this.base}:task:${taskId}`;
  }

  /**
   * A task's durable steps (hash: `r:<name>` results, `f:<name>` failures, `cp` its checkpoint, `done`; see
   * scripts/include/steps.lua), written by its runs through their fence, deleted when the task ends. One per
   * consumer group.
   */
  steps(taskId: string): string {
    return `${this.base}:steps:${taskId}`;
  }

  /** An out-of-line payload (string; scripts/include/body.lua), by a body id of its own (never the task's). */
  body(bodyId: string): string {
    return `${this.base}:body:${bodyId}`;
  }

  /** The same as the producer stores it, under the root (the enqueue copies it to each group's base). */
  rootBody(bodyId: string): string {
    return `${this.root}:body:${bodyId}`;
  }

  /** A tracked task's keys: its index, and its entry while it waits (string, see scripts/include/track.lua). */
  tracked(taskId: string): TrackedKeys {
    return { index: this.task(taskId), entry: `${this.base}:task-entry:${taskId}` };
  }

  /**
   * Latest wins: the record of a coalescing key (hash: the task waiting for the key and the newest entry
   * it runs, the tasks of the key running; see scripts/include/coalesce.lua), deleted when nothing of the
   * key waits or runs. One per consumer group.
   */
  coalesce(key: string): string {
    return `${this.base}:coalesce:${key}`;
  }

  /**
   * The settles of batch tasks in this shard, for their batches (list: `<seq>\n<batch id>\n<task id>\n<outcome>`,
   * see scripts/include/batch.lua), folded into each batch's record by reapers; written for the default group only.
   */
  get batchEvents(): string {
    return `${this.base}:batch-events`;
  }

  /** The sequence of this shard's batch events (string counter). */
  get batchSeq(): string {
    return `${this.base}:batch-seq`;
  }

  /**
   * The settles of flow nodes in this shard, for their flows (list: `<seq>\n<flow id>\n<node id>\n<outcome>\n<value>`,
   * see scripts/include/flow.lua), folded into each flow's record by reapers and by the worker that settled
   * them (lib/core/flows); written for the default group only. Their seq comes from `batchSeq`, the shard's one
   * sequence of events.
   */
  get flowEvents(): string {
    return `${this.base}:flow-events`;
  }

  /** The stored result of a `send()` task, kept for a TTL (string). */
  result(taskId: string): string {
    return `${this.root}:result:${taskId}`;
  }
}

/** The keys of one batch: its record (hash) and its children (hash: task id -> outcome and seq). */
export interface BatchKeys {
  readonly id: string;
  readonly record: string;
  readonly children: string;
  /** The patterns its tasks were added to (set; a cancel looks for them there). */
  readonly patterns: string;
}

/**
 * The keys of one flow, in a slot of their own (`{%F<flow id>}`; see scripts/include/flowRecord.lua): its
 * record (hash), its nodes' states (hash: node id -> `<state>/<seq>`), their edges (hash: node id ->
 * `<policy>|<dep>,<dep>`), their specs (hash: node id -> JSON) and their results (hash: node id -> JSON).
 */
export interface FlowKeys {
  readonly id: string;
  readonly record: string;
  readonly nodes: string;
  readonly edges: string;
  readonly specs: string;
  readonly results: string;
}

/** The keys of one tracked task: its index (hash), and the entry it waits under (string). */
export interface TrackedKeys {
  readonly index: string;
  readonly entry: string;
}

/** The shards of one queue, and which shard each client lives in. */
export class QueueLayout {
  readonly shards: readonly QueueKeys[];

  constructor(
    prefix: string,
    readonly queue: string,
    readonly shardCount: number,
    readonly group = DEFAULT_GROUP,
  ) {
    this.shards = Array.from(
      { length: shardCount },
      (_, shard) => new QueueKeys(prefix, queue, shard, shardCount, group),
    );
  }

  /** The shard of a client: all its tasks live there, so its FIFO order and cap hold as unsharded. */
  shardOf(clientId: string): QueueKeys {
    return this.shardCount === 1 ? this.shards[0] : this.shards[fnv1a(clientId) % this.shardCount];
  }
}

/** The keys of a prefix's recurring schedules (see changeSchedule-4.lua). */
export interface ScheduleKeys {
  /** Hash: schedule id -> the stored schedule (`<version>|<flags>|<anchor>|<source>|<spec JSON>`). */
  readonly records: string;
  /** Sorted set: schedule id -> its next tick (Redis time, ms). */
  readonly due: string;
  /** Hash: schedule id -> what its last ticks did (JSON). */
  readonly state: string;
  /** Hash: schedule id -> `<tick>|<lease end>` while a process fires it (see claimSchedules-5.lua). */
  readonly firing: string;
  /** String: Redis ms of the last take of due schedules (kept a minute; see claimSchedules-5.lua). */
  readonly checked: string;
  /** Channel: a schedule was stored or resumed (its ticks may now come earlier than a sleeping ticker knows). */
  readonly changed: string;
}

/** Keys that do not belong to one queue. */
export class PrefixKeys {
  /** Names of the queues that have had a worker (set), so reapers and admin tools can find them. */
  readonly queues: string;
  /**
   * Whose turn it is to sweep every queue of the prefix (string: the reaper's id, expiring after its
   * interval): the processes of a deployment share the periodic sweep instead of each repeating it.
   */
  readonly sweepTurn: string;
  // table-ok: one entry per queue
  private readonly layouts = new Map<string, QueueLayout>();

  /** The recurring schedules of the prefix (one hash tag: every schedule script runs on one slot). */
  readonly schedules: ScheduleKeys;

  /**
   * Batches whose callbacks are not on record as enqueued yet (sorted set: batch id -> when a reaper next
   * checks it, Redis ms): what a crash between a batch's completion and its callback's enqueue leaves is
   * found here.
   */
  readonly batchesDue: string;

  /** Batches opened and completed under this prefix (hash: opened, completed; for metrics). */
  readonly batchCounters: string;

  /**
   * Flows with work a crash may have cut off (sorted set: flow id -> when a reaper next checks it, Redis ms):
   * a creation whose first nodes may not be enqueued yet, a cancel whose released nodes may not be stopped
   * yet. A check folds the flow again, which answers what is left to do.
   */
  readonly flowsDue: string;

  /** Flows created and ended under this prefix (hash: created, succeeded, failed, cancelled; for metrics). */
  readonly flowCounters: string;

  /**
   * The marker of one count of a flow (string: `c` its creation, `e` its end; see countFlow-2.lua), so that
   * a count sent again counts nothing; beside the counters, in their slot.
   */
  flowCounted(id: string, created: string, what: 'c' | 'e'): string {
    return `${this.prefix}:{%F}:counted:${id}:${created}:${what}`;
  }

  /**
   * The marker of one count of a batch (string: `o` its opening, `c` its completion; countFlow-2.lua), so that
   * a count sent again (a resend after a reconnection) counts nothing; beside the counters, in their slot.
   */
  batchCounted(id: string, generation: string, what: 'o' | 'c'): string {
    return `${this.prefix}:{%B}:counted:${id}:${generation}:${what}`;
  }

  constructor(readonly prefix: string) {
    this.queues = `${prefix}:queues`;
    this.sweepTurn = `${prefix}:{%R}:sweep-turn`;
    this.batchesDue = `${prefix}:{%B}:due`;
    this.batchCounters = `${prefix}:{%B}:counters`;
    this.flowsDue = `${prefix}:{%F}:due`;
    this.flowCounters = `${prefix}:{%F}:counters`;
    // `{%S}`: no queue's tag can be this (a queue name's `%` is encoded as `%25`, a shard's marker is `%s`).
    const root = `${prefix}:{%S}`;
    this.schedules = {
      records: `${root}:schedules`,
      due: `${root}:due`,
      state: `${root}:state`,
      firing: `${root}:firing`,
      checked: `${root}:checked`,
      changed: `${root}:changed`,
    };
  }

  /**
   * The shard count a queue was first used with (string, in the unsharded tag): producers and workers
   * configured with another count are refused, so changing it can never hide tasks in other shards.
   */
  shardCount(queue: string): string {
    return `${this.prefix}:{${encodeQueueName(queue)}}:shards`;
  }

  /** The keys of a queue spread over `shardCount` shards (cached: building them hashes tags). */
  layout(queue: string, shardCount: number, group = DEFAULT_GROUP): QueueLayout {
    const id = `${shardCount}:${group}:${queue}`;
    let layout = this.layouts.get(id);
    if (!layout) {
      layout = new QueueLayout(this.prefix, queue, shardCount, group);
      this.layouts.set(id, layout);
    }
    return layout;
  }

  /**
   * A batch's record and children (see scripts/include/batchRecord.lua), under a hash tag of their own,
   * `{%B<batch id>}` (no queue's tag can be this: a queue name's `%` is encoded as `%25`).
   */
  batch(id: string): BatchKeys {
    const root = `${this.prefix}:{%B${id}}`;
    return { id, record: `${root}:batch`, children: `${root}:children`, patterns: `${root}:patterns` };
  }

  /**
   * A flow's keys (see FlowKeys), under a hash tag of their own, `{%F<flow id>}` (no queue's tag can be this:
   * a queue name's `%` is encoded as `%25`).
   */
  flow(id: string): FlowKeys {
    const root = `${this.prefix}:{%F${id}}`;
    return {
      id,
      record: `${root}:flow`,
      nodes: `${root}:nodes`,
      edges: `${root}:edges`,
      specs: `${root}:specs`,
      results: `${root}:results`,
    };
  }

  /** The pub/sub channel on which a client instance receives `send()` results. */
  replyChannel(clientInstanceId: string): string {
    return `${this.prefix}:replies:${clientInstanceId}`;
  }

  /** The keys of an unsharded queue (also where a sharded queue records its shard count). */
  queue(queue: string): QueueKeys {
    return this.layout(queue, 1).shards[0];
  }
}

/** The hash tag of shard `shard` of `shardCount` (see QueueKeys). */
export function shardTag(queue: string, shard: number, shardCount: number): string {
  const base = encodeQueueName(queue);
  if (shardCount === 1) {
    return `{${base}}`;
  }
  const low = Math.floor((shard * SLOT_COUNT) / shardCount);
  const high = Math.floor(((shard + 1) * SLOT_COUNT) / shardCount);
  for (let j = 0; ; j++) {
    const tag = `{${base}%s${shard}.${j}}`;
    const slot = hashSlot(tag);
    if (slot >= low && slot < high) {
      return tag;
    }
  }
}

/** Percent-encodes `%`, `{` and `}` so a queue name cannot open or close a hash tag. */
export function encodeQueueName(queue: string): string {
  return queue.replace(/[%{}]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}`);
}
