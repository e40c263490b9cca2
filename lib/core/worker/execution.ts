import type { LazyAbort } from '../support/lazy-abort.js';
import type { RunControl, TaskExecution } from './worker-types.js';

/**
 * What the runner hands to the adapter for one run. A class and not an object literal with a getter: a
 * literal's getter is a closure made per run, so every literal gets a hidden class of its own, made in
 * the old generation, and that hidden class keeps the run's objects alive through every scavenge until
 * the next full collection (measured: ~3.7 KB per task promoted, and scavenge pauses several times
 * longer, the latency tail). A getter on the prototype is shared, and the run dies young.
 */
export class RunExecution implements TaskExecution {
  constructor(
    readonly queue: string,
    readonly id: string,
    readonly clientId: string,
    readonly attempt: number,
    readonly maxAttempts: number,
    readonly enqueuedAt: number,
    readonly payload: unknown,
    readonly workerId: string,
    readonly group: string,
    readonly expectsReply: boolean,
    readonly control: RunControl,
    private readonly abort: LazyAbort,
  ) {}

  /** Made on first use: most handlers never look at it. */
  get signal(): AbortSignal {
    return this.abort.signal;
  }
}
