/**
 * The one place that spells Redis key names.
 *
 * Every key of a queue starts with the hash tag `{prefix:queue}`, so all of a queue's keys live in one
 * Redis Cluster slot and every Lua script touches one slot. Different queues hash to different slots.
 * The queue name is a Nest pattern; the characters that would end or open a hash tag early are
 * percent-encoded so a pattern can never move its keys to another slot.
 */
export class QueueKeys {
  /** The `{prefix:queue}` hash tag shared by every key of this queue. */
  readonly tag: string;
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
  /** Tasks claimed under a per-client cap (hash: fencing token -> client id). */
  readonly counted: string;
  /** Tasks of each client in flight under a per-client cap (hash: client id -> count). */
  readonly inflight: string;
  /** Clients taken off the ring at their cap, until one of their tasks leaves a worker (set). */
  readonly parked: string;
  /** Held by the process recovering dead workers of this queue, so reapers do not stampede (string). */
  readonly reaperLock: string;

  constructor(
    readonly prefix: string,
    readonly queue: string,
  ) {
    this.tag = `{${prefix}:${encodeQueueName(queue)}}`;
    this.ring = `${this.tag}:ring`;
    this.workers = `${this.tag}:workers`;
    this.sequence = `${this.tag}:sequence`;
    this.deadLetters = `${this.tag}:dead`;
    this.delayed = `${this.tag}:delayed`;
    this.reaperLock = `${this.tag}:reaper-lock`;
    this.prioritized = `${this.tag}:prioritized`;
    this.counted = `${this.tag}:counted`;
    this.inflight = `${this.tag}:inflight`;
    this.parked = `${this.tag}:parked`;
  }

  /**
   * Pending tasks of one client, oldest first (list of encoded entries). With an empty client id, the
   * prefix the claim script completes with the client ids it takes from the ring (same hash tag).
   */
  pending(clientId: string): string {
    return `${this.tag}:pending:${clientId}`;
  }

  /**
   * Pending tasks of one client that have a priority (sorted set: 15-digit sequence + encoded entry ->
   * -priority; claims take these before the client's plain list).
   */
  priority(clientId: string): string {
    return `${this.tag}:priority:${clientId}`;
  }

  /** Held by the live task with this deduplication key (string: task id, with a TTL). */
  dedup(key: string): string {
    return `${this.tag}:dedup:${key}`;
  }

  /** The pub/sub channel told the due time of a delayed task that became the queue's earliest. */
  get dueChannel(): string {
    return `${this.tag}:due`;
  }

  /** Tasks one worker has claimed and not yet settled (hash: fencing token -> encoded entry). */
  processing(workerId: string): string {
    return `${this.tag}:processing:${workerId}`;
  }

  /** The stored result of a `send()` task, kept for a TTL (string). */
  result(taskId: string): string {
    return `${this.tag}:result:${taskId}`;
  }
}

/** Keys that do not belong to one queue. */
export class PrefixKeys {
  /** Names of the queues that have had a worker (set), so reapers and admin tools can find them. */
  readonly queues: string;

  constructor(readonly prefix: string) {
    this.queues = `${prefix}:queues`;
  }

  /** The pub/sub channel on which a client instance receives `send()` results. */
  replyChannel(clientInstanceId: string): string {
    return `${this.prefix}:replies:${clientInstanceId}`;
  }

  queue(queue: string): QueueKeys {
    return new QueueKeys(this.prefix, queue);
  }
}

/** Percent-encodes `%`, `{` and `}` so a queue name cannot open or close a hash tag. */
export function encodeQueueName(queue: string): string {
  return queue.replace(/[%{}]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}`);
}
