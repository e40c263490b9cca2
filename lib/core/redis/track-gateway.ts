import type { QueueKeys } from './keys.js';
import type { TaskRedis } from './scripts.js';

/** What revokeTask did (see its header): cancelled (was pending, delayed or running), requested, ended, unknown. */
export interface RevokeAnswer {
  readonly outcome: 'cancelled' | 'requested' | 'ended' | 'unknown';
  readonly state: string;
}

/** What startCoalesced answers for one task (see its header). */
export type CoalescedStart = 'run' | 'replaced' | 'lost' | { readonly entry: string };

/**
 * The scripts that act on one task by id, one method each (like ScriptGateway for the queues): startTasks
 * (the step between a claim and a tracked task's handler), revokeTask (cancel by id), reportProgress, and
 * cancelTask (a waiting send() task whose caller gave up).
 */
export class TrackGateway {
  constructor(private readonly redis: TaskRedis) {}

  /**
   * startTasks: before tracked tasks run, each is recorded running, or cancelled (a cancel asked while it
   * was between places); per task 'run', 'cancelled' (do not run it) or 'lost' (no longer held).
   */
  async start(
    keys: QueueKeys,
    workerId: string,
    tasks: readonly { token: string; id: string; attempt: number }[],
  ): Promise<('run' | 'cancelled' | 'lost')[]> {
    const fields: (string | number)[] = [];
    for (const task of tasks) fields.push(task.token, task.id, task.attempt);
    const results = await this.redis.startTasks(keys.base, keys.root, workerId, ...fields);
    return results.map((result) => (result === 1 ? 'run' : result === 2 ? 'cancelled' : 'lost'));
  }

  /**
   * startCoalesced: before tasks with a coalescing key run, each takes its key's newest entry: per task
   * 'run' (as claimed), the entry to run instead (the newest, under the same token), 'replaced' (an older
   * payload than its key's newest: it left the worker, do not run it) or 'lost' (no longer held).
   */
  async startCoalesced(
    keys: QueueKeys,
    workerId: string,
    tasks: readonly { token: string; id: string }[],
  ): Promise<CoalescedStart[]> {
    const fields: string[] = [];
    for (const task of tasks) fields.push(task.token, task.id);
    const results = await this.redis.startCoalesced(keys.base, workerId, ...fields);
    return results.map((result) =>
      typeof result === 'string' ? { entry: result } : result === 1 ? 'run' : result === 2 ? 'replaced' : 'lost',
    );
  }

  /** revokeTask: cancels a tracked task wherever it is (see the script's header for the answers). */
  async revoke(keys: QueueKeys, id: string, reason: string, callId: string): Promise<RevokeAnswer> {
    const [outcome, state] = await this.redis.revokeTask(keys.base, keys.root, id, reason, callId);
    return { outcome, state };
  }

  /** reportProgress: a held task's progress stored (tracked) and published (a caller listens); false when no longer held. */
  async progress(
    keys: QueueKeys,
    workerId: string,
    report: {
      token: string;
      id?: string;
      seq: number;
      value: string;
      publish?: { channel: string; message: string };
    },
  ): Promise<boolean> {
    const reported = await this.redis.reportProgress(
      keys.base,
      workerId,
      report.token,
      report.id ?? '',
      report.seq,
      report.value,
      report.publish?.channel ?? '',
      report.publish?.message ?? '',
    );
    return reported === 1;
  }

  /** cancelTask: true when the task was still waiting and is removed; false when claimed or gone. */
  async cancel(
    keys: QueueKeys,
    task: {
      clientId: string;
      entry: string;
      priority: number;
      deduplicationKey?: string;
      id: string;
      track?: unknown;
    },
  ): Promise<boolean> {
    const dedup = task.deduplicationKey === undefined ? keys.ring : keys.dedup(task.deduplicationKey);
    const removed = await this.redis.cancelTask(
      keys.pending(task.clientId),
      keys.priority(task.clientId),
      keys.delayed,
      dedup,
      keys.prioritized,
      keys.pendingCount,
      keys.base,
      keys.root,
      task.entry,
      task.priority,
      task.deduplicationKey === undefined ? '' : task.id,
      ...(task.track ? [keys.tracked(task.id).index, keys.tracked(task.id).entry] : []),
    );
    return removed === 1;
  }
}
