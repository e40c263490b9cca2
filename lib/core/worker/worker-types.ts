import type { QueueKeys } from '../redis/keys.js';
import type { FlowNodeInfo } from '../model/flow.js';
import type { WakeSignals } from './wake-signals.js';
import type { SettleOptions } from '../redis/requeue.js';
import type { TaskOutcomeEvent } from '../model/outcomes.js';
import type { PatternSettings } from '../config/pattern-settings.js';
import type { TaskTracing } from '../support/tracing.js';
import type { StepOptions } from './run-steps.js';

/** What the worker hands to the code that runs a task (the Nest adapter, in this package). */
export interface TaskExecution {
  readonly queue: string;
  readonly id: string;
  readonly clientId: string;
  /** 1-based number of this run. */
  readonly attempt: number;
  readonly maxAttempts: number;
  readonly enqueuedAt: number;
  readonly payload: unknown;
  readonly workerId: string;
  /** The consumer group this worker belongs to (`default` unless the transport names one). */
  readonly group: string;
  readonly expectsReply: boolean;
  /** A node of a flow: its flow, its node id and its parents' outcomes. */
  readonly flow?: FlowNodeInfo;
  /** Aborted when the worker gives up on this run (lease lost, shutdown timeout). */
  readonly signal: AbortSignal;
  /** What the handler may decide about its own run (fenced: refused once the run no longer holds the task). */
  readonly control: RunControl;
}

/**
 * A handler's say over its own run. Each call is fenced: from a run that lost its lease, was given up at
 * shutdown, or is over, it answers `false` and nothing is applied (never a throw or a rejection: such
 * calls come late, from timers, where either would end the process).
 */
export interface RunControl {
  /**
   * Run the task again later, after `delayMs` (default: the retry policy's backoff), whatever the handler
   * returns or throws after this call. Counts as an attempt: on the last one the task is dead-lettered.
   */
  retry(options?: { readonly delayMs?: number }): boolean;
  /** Send the task to dead letters when the handler returns (reason `rejected`, `detail` = `reason`). */
  deadLetter(reason: string): boolean;
  /**
   * Confirms in Redis that this run still holds the task and renews the worker's lease, then moves the
   * run's handler-timeout deadline to at least `ms` from now. Resolves `false` when the task is held no
   * more (the run's signal aborts), the run is over, or Redis could not confirm it.
   */
  extendLease(ms: number): Promise<boolean>;
  /**
   * Reports progress (any JSON value, at most 64 KiB): kept on a tracked task's status, told to a `send()`
   * caller that listens (in order, before the result) and to `progress` listeners. Resolves `false` when
   * this run no longer holds the task (nothing reported) or Redis could not take it; throws only for a
   * value that is not JSON or too large.
   */
  progress(value: unknown): Promise<boolean>;
  /**
   * A durable step: `fn` runs once per task across attempts, lease takeovers and restarts; its result (JSON, at
   * most 512 KiB) is saved through the run's fence and returned, and later runs get the saved result without
   * running `fn`. At a step boundary a run of a stopping worker, or past `maxRuntimeMs`, gives its task back
   * (throws `TaskYieldedError`); a save refused because another run holds the task throws `LeaseLostError`.
   */
  step<T>(name: string, fn: () => T | Promise<T>, options?: StepOptions): Promise<T>;
  /** Saves the run's cursor (any JSON value, at most 512 KiB) through its fence; later runs read it with `getCheckpoint()`. */
  checkpoint(value: unknown): Promise<void>;
  /** The last checkpoint saved by this task's runs, or undefined. */
  getCheckpoint<T = unknown>(): Promise<T | undefined>;
  /** A stable idempotency key for step `name` of this task (the same on every attempt), for external APIs. */
  stepKey(name: string): string;
}

export type TaskOutcome =
  | {
      readonly status: 'succeeded';
      readonly response?: unknown;
      /** The reply to a `send()` caller, serialized (set by the worker before settling). */
      readonly reply?: string;
    }
  | {
      readonly status: 'failed';
      /**
       * The handler's own error where it can be had, else what the framework's error handling made of it
       * (for Nest: a user exception filter's output). Dead letters record it, and a `send()` caller gets it.
       */
      readonly error: unknown;
    };

export type TaskExecutor = (execution: TaskExecution) => Promise<TaskOutcome>;

export interface WorkerOptions extends SettleOptions {
  /** Largest `send()` result sent back (its JSON, bytes); a larger one answers `ResultTooLargeError`. */
  readonly maxResultBytes?: number;
  /** Each pattern's retry policy, per-client concurrency, rate limit and handler timeout. */
  readonly patterns: PatternSettings;
  readonly concurrency: number;
  /** Slots kept free for idle patterns while another holds its share of all (see Slots). */
  readonly idleSlots?: number;
  readonly prefetch: number;
  readonly heartbeatIntervalMs: number;
  readonly leaseMs: number;
  readonly shutdownTimeoutMs: number;
  /** Longest an idle claim loop waits for a wake message before it claims anyway (the backstop). */
  readonly blockTimeoutMs: number;
  /** The wake messages of the process's idle queue shards (heard on the runtime's one subscriber). */
  readonly wakeSignals: WakeSignals;
  /** Called with the due time of every retry this worker schedules (to promote it on time). */
  readonly onDelayed?: (queue: string, dueAt: number) => void;
  /** How long past its due time a Redis command may go unanswered before the watchdog reconnects. */
  readonly watchdogTimeoutMs: number;
  /** Told when the watchdog finds Redis stopped answering (true) and when it answers again (false). */
  readonly onStall?: (stalled: boolean) => void;
  /** The consumer group: each group gets its own copy of every task of the patterns it consumes. */
  readonly group?: string;
  /** Claim weights of clients, written to every queue at start (1 removes a weight). */
  readonly clientWeights?: Readonly<Record<string, number>>;
  /** Told how each run ended (completed, retried, dead-lettered, lease lost); never given the payload. */
  readonly onOutcome?: (event: TaskOutcomeEvent) => void;
  /** Told once a node of a flow settled (its shard's flow events are folded then: its children released at once). */
  readonly onFlowSettled?: (keys: QueueKeys) => void;
  /** Told of each progress value a handler reported (`ctx.progress()`), once Redis took it. */
  readonly onProgress?: (event: TaskProgressEvent) => void;
  /** Whether `onOutcome` has anyone to tell right now (false: no event is built per run). */
  readonly wantsOutcomes?: () => boolean;
  /**
   * A run going on this long is logged as slow (once), and if the worker shuts down before it ends,
   * the interruption counts as an attempt (so a task that hangs every run ends in dead letters).
   */
  readonly slowRunMs: number;
  /** Whether a `send()` caller whose task failed gets the head of the handler's stack too. */
  readonly sendErrorStack?: boolean;
  /** OpenTelemetry: a CONSUMER span per run, child of the producer's (absent: no tracing). */
  readonly tracing?: TaskTracing;
}

/** A progress value a handler reported (the transport's `progress` event). */
export interface TaskProgressEvent {
  /** The pattern. */
  readonly queue: string;
  readonly id: string;
  /** Its place among the run's reports (from 1). */
  readonly seq: number;
  readonly value: unknown;
}

/**
 * The lease a worker holds in a shard where it has something at stake, written at every beat: `leaseMs` and
 * one beat more, so a blocked loop may miss one beat and keep it. A claim that takes tasks under a longer
 * (idle) lease cuts it to this.
 */
export function heldLeaseMs(options: { readonly leaseMs: number; readonly heartbeatIntervalMs: number }): number {
  return options.leaseMs + options.heartbeatIntervalMs;
}
