import type { TaskEnvelope } from '../model/codec.js';
import type { HandlerRequest } from '../model/retry-policy.js';
import type { ConsumerTrace } from '../support/tracing.js';
import type { QueueKeys } from '../redis/keys.js';
import { SlotSet } from '../support/churn-tables.js';
import { LazyAbort } from '../support/lazy-abort.js';
import { LeaseLostError, TaskCancelledError, TaskReplacedError } from '../model/errors.js';
import type { TaskLogger } from '../support/logger.js';

/** Why a run gives its task back without counting an attempt (set by a durable step; applied when the run failed). */
export interface RunAgain {
  readonly why: 'step' | 'yield';
  readonly delayMs: number;
}

/** One run of a task on this worker, from its claim until it settled (or was given up). */
export interface Run {
  readonly keys: QueueKeys;
  readonly token: string;
  readonly abort: LazyAbort;
  /** Its place among the runs under way (see SlotSet). */
  slot: number;
  done?: Promise<void>;
  leaseLost?: boolean;
  /** When its handler started (Date.now()), once it has. */
  startedAt?: number;
  /** What the slow-run warning names (read only when it is given). */
  about?: TaskEnvelope;
  attempt?: number;
  warnedSlow?: boolean;
  /** What the handler asked for (`ctx.retry()`, `ctx.deadLetter()`), applied when it returns. */
  requested?: HandlerRequest;
  /** When the handler timeout fires (Date.now() ms), when there is one; `ctx.extendLease()` moves it. */
  deadline?: number;
  /** Set once the run's outcome is being settled: later requests are refused. */
  over?: boolean;
  /** The run's CONSUMER span (OpenTelemetry), when traced. */
  trace?: ConsumerTrace;
  /** Its task was cancelled (its token revoked): the heartbeat aborted it with `TaskCancelledError`. */
  cancelled?: boolean;
  /** Its task was superseded by this newer task of its coalescing key: aborted with `TaskReplacedError`. */
  replacedBy?: string;
  /** The run read or wrote durable steps (`ctx.step`): its success is acknowledged on its own, which deletes them. */
  stepped?: boolean;
  /** A step asked for the task to run again without counting an attempt (applied when the run failed). */
  again?: RunAgain;
  /** Progress values reported so far (each report's sequence), and the last report on its way. */
  progressSeq?: number;
  progressing?: Promise<boolean>;
}

/** Why a run's token was revoked: cancelled (with the canceller's reason), or superseded by a newer task of its key. */
export type RunEnded = { readonly reason: string } | { readonly replacedBy: string };

/**
 * The run no longer holds its task: another process recovered it (the heartbeat found its token gone, or
 * `ctx.extendLease()` did). Marks it once and tells its handler (`ctx.signal` aborts with `LeaseLostError`);
 * true the first time, false when it was known already.
 */
export function loseLease(run: Run, ended?: RunEnded): boolean {
  if (run.leaseLost) return false;
  run.leaseLost = true;
  const id = run.about?.id ?? run.token;
  if (ended && 'replacedBy' in ended) {
    run.replacedBy = ended.replacedBy;
    run.abort.abort(new TaskReplacedError(run.keys.queue, id, ended.replacedBy));
    return true;
  }
  run.cancelled = ended !== undefined;
  run.abort.abort(
    ended
      ? new TaskCancelledError(run.keys.queue, id, ended.reason)
      : new LeaseLostError(run.keys.queue, id, 'its lease was lost: another process recovered the task'),
  );
  return true;
}

/**
 * The runs under way on a worker. Held by slot, not by a key: a key made per task from the shard and
 * the token (a concatenated string) was flattened and hashed on every begin and end, a twentieth of a
 * worker's CPU at concurrency 64. Finding a run by its token (a heartbeat reporting a lost lease, rare)
 * looks through the runs.
 */
export class RunningTasks {
  private readonly runs = new SlotSet<Run>();

  /** A new run of a claimed task (each claim's token is unique to it: see claim-acks' nextTokenPrefix). */
  begin(keys: QueueKeys, token: string): Run {
    const run: Run = { keys, token, abort: new LazyAbort(), slot: 0 };
    run.slot = this.runs.add(run);
    return run;
  }

  /** How many runs are under way. */
  get count(): number {
    return this.runs.size;
  }

  end(run: Run): void {
    this.runs.delete(run.slot, run);
  }

  find(keys: QueueKeys, token: string): Run | undefined {
    for (const run of this.runs.values()) if (run.token === token && run.keys === keys) return run;
    return undefined;
  }

  /** Tokens of the runs of one queue shard. */
  tokensOf(keys: QueueKeys): string[] {
    const tokens: string[] = [];
    for (const run of this.runs.values()) if (run.keys === keys) tokens.push(run.token);
    return tokens;
  }

  /** Tokens of a shard's runs that have gone on for `slowRunMs` or more (their interruption counts as an attempt). */
  longRunning(keys: QueueKeys, now: number, slowRunMs: number): string[] {
    const tokens: string[] = [];
    for (const run of this.runs.values()) {
      if (run.keys === keys && run.startedAt !== undefined && now - run.startedAt >= slowRunMs) tokens.push(run.token);
    }
    return tokens;
  }

  /** Resolves when every run ended, or after `timeoutMs`. */
  async settled(timeoutMs: number): Promise<void> {
    if (this.runs.size === 0) return;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
    });
    await Promise.race([
      Promise.allSettled([...this.runs.values()].flatMap((run) => (run.done ? [run.done] : []))),
      timeout,
    ]);
    clearTimeout(timer);
  }

  abortAll(reason: Error): void {
    for (const run of this.runs.values()) run.abort.abort(reason);
  }

  /** Warns once about each run going on past `slowRunMs` (a hang that nothing else reports). */
  warnSlow(now: number, slowRunMs: number, logger: TaskLogger): void {
    for (const run of this.runs.values()) {
      if (run.startedAt !== undefined && !run.warnedSlow && now - run.startedAt >= slowRunMs) {
        run.warnedSlow = true;
        logger.warn(
          `task ${run.about?.id ?? '?'} of "${run.keys.queue}" (attempt ${run.attempt ?? '?'}) has been running for ${now - run.startedAt} ms (slowRunMs ${slowRunMs}); ` +
            'if the worker shuts down before it ends, the interruption counts as an attempt',
        );
      }
    }
  }
}
