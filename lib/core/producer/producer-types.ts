import type { TaskLogger } from '../support/logger.js';
import type { DurabilityOptions } from '../config/options.js';
import type { ConnectionWatch } from '../redis/connection.js';
import type { TaskTracing } from '../support/tracing.js';
import type { QueueKeys } from '../redis/keys.js';
import type { PreparedTask } from '../model/prepared-task.js';
import type { TrackOptions } from '../model/task-status.js';

/** How one enqueued task is answered: its receipt once Redis wrote it, or why it was not (maybe) written. */
export interface EnqueueAnswer {
  written(receipt: EnqueueReceipt): void;
  failed(error: unknown): void;
}

/** What `enqueue` reports per item. */
export interface EnqueueReceipt {
  /** The task id; for a duplicate, the id of the live task that holds the deduplication key. */
  readonly id: string;
  /** True when the item was refused because a live task holds its deduplication key. */
  readonly duplicate: boolean;
  /**
   * A task with a coalescing key that took the place of the waiting task of its key (which will not run):
   * that task's id. Absent when none waited (it waits as its key's task) or for tasks without a key.
   */
  readonly replaced?: string;
  /** A task with a coalescing key in mode `supersede` whose emit cancelled a running task of its key: that task's id. */
  readonly superseded?: string;
}

export interface ProducerOptions {
  readonly maxPayloadBytes: number;
  /** Items per script call: each chunk is one round trip, all or nothing. */
  readonly batchChunkSize: number;
  /** Default TTL of deduplication keys (ms). */
  readonly deduplicationTtlMs: number;
  /** Whether tasks are tracked unless a record says otherwise (the client's `track`). */
  readonly track?: boolean | TrackOptions;
  /** A payload over this many bytes (JSON) is stored out of line (the client's `outOfLineBytes`); false: never. */
  readonly outOfLineBytes?: number | false;
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
  /** OpenTelemetry: a PRODUCER span per call, its context stored with each task (absent: no tracing). */
  readonly tracing?: TaskTracing;
  /** Told of each send() task handed over, with where it goes (the reply inbox can cancel it). */
  readonly awaitingReply?: (keys: QueueKeys, task: PreparedTask) => void;
  /** Where the producer says what the caller should know (a pattern no worker ever consumed). */
  readonly logger?: TaskLogger;
}
