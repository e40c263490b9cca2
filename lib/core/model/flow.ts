import type { BackoffOptions } from './retry-policy.js';
import type { BatchCallback } from './batch.js';

/**
 * What a node does when a parent of it did not succeed (failed: dead-lettered; cancelled; skipped):
 * - `fail-flow` (the default): the flow fails at once; its waiting nodes are cancelled, its released ones
 *   stopped through their fences, and its completion callback says why.
 * - `skip`: the node is skipped (recorded as such), and its own dependents are asked in turn.
 * - `run`: the node runs once every parent settled, and sees each parent's outcome in `ctx.parentResults()`.
 */
export type FlowParentPolicy = 'fail-flow' | 'skip' | 'run';

/** One node of a flow: a task of `pattern`, released once every node in `deps` settled. */
export interface FlowNode {
  /** Unique within the flow: at most 100 characters, no braces, spaces, commas or control characters. */
  readonly id: string;
  readonly pattern: string;
  readonly payload?: unknown;
  /** The nodes it waits for (their ids); none: released when the flow is created. */
  readonly deps?: readonly string[];
  /** What it does when a parent did not succeed (default `fail-flow`). */
  readonly onParentFailure?: FlowParentPolicy;
  /** Its task's client id (default: the client's). */
  readonly clientId?: string;
  readonly maxAttempts?: number;
  readonly backoff?: BackoffOptions;
  readonly priority?: number;
}

/** A task enqueued once when a flow ended: its pattern, and optionally a payload and client id of its own. */
export type FlowCallback = BatchCallback;

/** What `RedisTaskClient.flow()` is given. */
export interface FlowOptions {
  /** The flow id (default: generated): a `flow()` call again with the same id creates nothing new. */
  readonly id?: string;
  readonly nodes: readonly FlowNode[];
  /** Enqueued exactly once when the flow ended (succeeded, failed or cancelled), with a `FlowSummary`. */
  readonly onComplete?: FlowCallback;
  /** How long the flow's records are kept once it ended (ms; default 1 day). */
  readonly keepMs?: number;
}

/** What `flow()` answers: the flow id, whether this call created it, and each node's task id. */
export interface FlowReceipt {
  readonly flowId: string;
  /** False when a flow with this id existed already (a call again after a lost reply): nothing was written. */
  readonly created: boolean;
  /** Each node's task id, by node id (`flow.<flow id>.<node id>`). */
  readonly taskIds: Readonly<Record<string, string>>;
}

/** Where a node is: waiting for parents, released (enqueued: waiting, delayed or running), or its end. */
export type FlowNodeState = 'waiting' | 'released' | 'succeeded' | 'failed' | 'cancelled' | 'skipped';

/** Where a flow is; `unknown`: no record (never created, or expired `keepMs` after it ended). */
export type FlowState = 'running' | 'succeeded' | 'failed' | 'cancelled' | 'unknown';

/** An error as a flow records it: never a stack, never a payload. */
export interface FlowError {
  readonly name?: string;
  readonly code?: string;
  readonly message: string;
  /** Why a failed node was dead-lettered (`retries-exhausted`, `non-retryable`, `expired`, ...). */
  readonly reason?: string;
}

/** A parent's outcome as its child sees it (`ctx.parentResults()`). */
export type FlowParentResult =
  | {
      readonly state: 'succeeded';
      /** The parent handler's return value (null for none). */
      readonly result: unknown;
      /** Set instead when its result could not be handed on (larger than the cap: `ResultTooLargeError`). */
      readonly error?: FlowError;
    }
  | { readonly state: 'failed' | 'cancelled' | 'skipped'; readonly error?: FlowError };

/** What a node's handler knows of its flow (`ctx.getFlow()`, `ctx.parentResults()`). */
export interface FlowNodeInfo {
  readonly flowId: string;
  readonly nodeId: string;
  /** Its parents' outcomes, by node id, as they were when it was released. */
  readonly parents: Readonly<Record<string, FlowParentResult>>;
}

/** One node as `getFlow` shows it. */
export interface FlowNodeStatus {
  readonly id: string;
  readonly pattern: string;
  readonly taskId: string;
  readonly deps: readonly string[];
  readonly onParentFailure: FlowParentPolicy;
  readonly state: FlowNodeState;
  /** A succeeded node's result. */
  readonly result?: unknown;
  /** A failed node's error; a cancelled or skipped one's reason. */
  readonly error?: FlowError;
}

/** Where a flow is (`RedisTaskAdmin.getFlow`). */
export interface FlowStatus {
  readonly id: string;
  readonly state: FlowState;
  /** Why it failed or was cancelled. */
  readonly reason?: string;
  /** Whether every node settled (its completion callback is enqueued then). */
  readonly ended: boolean;
  readonly createdAt?: number;
  readonly endedAt?: number;
  readonly nodes: readonly FlowNodeStatus[];
  /** The completion callback's task id, once enqueued. */
  readonly callbackId?: string;
}

/** The payload the completion callback's handler gets. */
export interface FlowSummary {
  readonly flowId: string;
  readonly state: 'succeeded' | 'failed' | 'cancelled';
  readonly reason?: string;
  readonly succeeded: number;
  readonly failed: number;
  readonly cancelled: number;
  readonly skipped: number;
  /** The ids of the nodes that failed (dead-lettered). */
  readonly failedIds: string[];
  /** The callback's own payload (`onComplete.payload`), if it has one. */
  readonly payload?: unknown;
}

/** What `cancelFlow` did: cancelled (waiting nodes dropped, released ones stopped), or not. */
export type FlowCancelResult =
  { readonly cancelled: true; readonly stopped: number } | { readonly cancelled: false; readonly state: FlowState };

/** A node's parents and policy, as Lua reads them: `<policy letter>|<dep>,<dep>` (letters: f, s, r). */
export const POLICY_LETTERS: Readonly<Record<FlowParentPolicy, string>> = { 'fail-flow': 'f', skip: 's', run: 'r' };

/** Node states in the store: one letter each (see scripts/include/flowRecord.lua). */
export const NODE_STATES: Readonly<Record<string, FlowNodeState>> = {
  w: 'waiting',
  q: 'released',
  r: 'released',
  s: 'succeeded',
  d: 'failed',
  c: 'cancelled',
  k: 'skipped',
};

/** How often a flow in the due index is checked again while it has work a crash may cut off (ms). */
export const FLOW_RECHECK_MS = 30_000;

/** Most nodes in one flow. */
export const MAX_FLOW_NODES = 1_000;
/** Longest flow id and node id. */
export const MAX_FLOW_ID_LENGTH = 100;
/** Default of `keepMs`: a day. */
export const FLOW_DEFAULT_KEEP_MS = 86_400_000;

/** A node's task id: fixed, so that a release made again is the same task (its guard refuses a second). */
export function flowTaskId(flowId: string, nodeId: string): string {
  return `flow.${flowId}.${nodeId}`;
}

/** The deduplication guard of a node's release, of the flow's generation (`created`, Redis ms). */
export function flowGuard(flowId: string, created: string, nodeId: string): string {
  return `flow:${flowId}:${created}:${nodeId}`;
}

/** The completion callback's task id (not `flow.<id>.…`: a node may be named `complete`). */
export function flowCallbackId(flowId: string): string {
  return `flow-complete.${flowId}`;
}
