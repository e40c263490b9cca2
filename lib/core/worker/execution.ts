import type { TaskEnvelope } from '../model/codec.js';
import type { LazyAbort } from '../support/lazy-abort.js';
import type { FlowNodeInfo } from '../model/flow.js';
import type { RunControl, TaskExecution } from './worker-types.js';

/**
 * What the runner hands to the adapter for one run. A class and not an object literal with a getter: a
 * literal's getter is a closure made per run, so every literal gets a hidden class of its own, made in
 * the old generation, and that hidden class keeps the run's objects alive through every scavenge until
 * the next full collection (measured: ~3.7 KB per task promoted, and scavenge pauses several times
 * longer, the latency tail). A getter on the prototype is shared, and the run dies young.
 */
export class RunExecution implements TaskExecution {
  readonly id: string;
  readonly clientId: string;
  readonly enqueuedAt: number;
  readonly payload: unknown;
  readonly expectsReply: boolean;
  readonly workerId: string;
  readonly group: string;
  readonly flow?: FlowNodeInfo;

  constructor(
    readonly queue: string,
    envelope: TaskEnvelope,
    readonly attempt: number,
    readonly maxAttempts: number,
    /** The worker running it (one object per worker). */
    worker: RunningWorker,
    readonly control: RunControl,
    private readonly abort: LazyAbort,
  ) {
    // Copied into fields of its own (not getters over the envelope): handlers read them as plain data.
    this.id = envelope.id;
    this.clientId = envelope.clientId;
    this.enqueuedAt = envelope.enqueuedAt;
    this.payload = envelope.payload;
    this.expectsReply = envelope.replyTo !== undefined;
    this.workerId = worker.workerId;
    this.group = worker.group;
    if (envelope.flow !== undefined) {
      this.flow = { flowId: envelope.flow, nodeId: envelope.node ?? '', parents: envelope.parents ?? {} };
    }
  }

  /** Made on first use: most handlers never look at it. */
  get signal(): AbortSignal {
    return this.abort.signal;
  }
}

/** Who runs a task: the worker's id and consumer group. */
export interface RunningWorker {
  readonly workerId: string;
  readonly group: string;
}
