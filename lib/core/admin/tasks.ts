import { randomUUID } from 'node:crypto';
import { InvalidTaskError } from '../model/errors.js';
import { parseTaskIndex, type CancelResult, type TaskState, type TaskStatus } from '../model/task-status.js';
import { DEFAULT_GROUP, type QueueKeys } from '../redis/keys.js';
import type { RevokeAnswer } from '../redis/track-gateway.js';
import { describe } from '../support/describe.js';
import { AdminPart } from './part.js';

/** Longest reason a cancel may give (it is stored and sent to a `send()` caller). */
export const MAX_CANCEL_REASON = 1_000;

/**
 * One tracked task by id: where it is (`get`), and stopping it wherever it is (`cancel`). A task is found
 * by its index key, one read per shard of its queue (a sharded queue places a task by its client id,
 * which the caller need not know), never by scanning.
 */
export class TaskLookup extends AdminPart {
  /** The task's status in this part's consumer group; `unknown` when it has no index there. */
  async get(queue: string, id: string): Promise<TaskStatus> {
    checkId(id);
    for (const keys of await this.shards(queue)) {
      const fields = await this.redis.hgetall(keys.task(id)).catch(() => ({}) as Record<string, string>);
      if (Object.keys(fields).length === 0) continue;
      return this.completed(
        keys,
        id,
        await this.withSteps(keys, id, parseTaskIndex(fields, { id, pattern: queue, group: this.group })),
      );
    }
    return { state: 'unknown', id, pattern: queue, group: this.group };
  }

  /**
   * Cancels the task in every consumer group that holds a copy (this part's group first): a waiting copy
   * is removed, a running one has its fencing token revoked (its worker's `ctx.signal` aborts at its next
   * heartbeat; its late settle is refused). Answers what it did to this group's copy, or to the first copy
   * found.
   */
  async cancel(queue: string, id: string, reason = ''): Promise<CancelResult> {
    checkId(id);
    if (typeof reason !== 'string' || reason.length > MAX_CANCEL_REASON) {
      throw new InvalidTaskError(
        `cancel() reason must be a string of at most ${MAX_CANCEL_REASON} characters, got ${describe(reason)}`,
      );
    }
    const call = randomUUID();
    const answers: RevokeAnswer[] = [];
    const { shards } = await this.layouts.layout(queue);
    for (const group of await this.groupsOf(queue)) {
      for (const shard of shards) {
        const answer = await this.store.gateway.track.revoke(shard.forGroup(group), id, reason, call);
        if (answer.outcome !== 'unknown') {
          answers.push(answer);
          break; // a task lives in one shard
        }
      }
    }
    const done = answers.find((answer) => answer.outcome === 'cancelled' || answer.outcome === 'requested');
    if (done) return { cancelled: true, was: done.state as 'pending' | 'delayed' | 'running' };
    const ended = answers.find((answer) => answer.outcome === 'ended');
    return { cancelled: false, state: (ended?.state as TaskState | undefined) ?? 'unknown' };
  }

  /** This part's group first, then every other group registered on the queue (each has its own copy). */
  private async groupsOf(queue: string): Promise<string[]> {
    const [first] = await this.shards(queue);
    const registered = await this.redis.smembers(first.groups).catch(() => [] as string[]);
    return [...new Set([this.group, DEFAULT_GROUP, ...registered])];
  }

  /** What the index alone cannot say: a running task's lease, a waiting one's place. */
  /** A live task's durable steps (how many finished, its checkpoint); they go when it ends. */
  private async withSteps(keys: QueueKeys, id: string, status: TaskStatus): Promise<TaskStatus> {
    if (status.state !== 'pending' && status.state !== 'delayed' && status.state !== 'running') return status;
    const [done, checkpoint] = await this.redis.hmget(keys.steps(id), 'done', 'cp').catch(() => [null, null]);
    if (done === null && checkpoint === null) return status;
    const steps = {
      done: Number(done ?? 0),
      ...(checkpoint?.startsWith('=') ? { checkpoint: parseJson(checkpoint.slice(1)) } : {}),
    };
    return { ...status, steps };
  }

  private async completed(keys: QueueKeys, id: string, status: TaskStatus): Promise<TaskStatus> {
    if (status.state === 'running' && status.workerId !== undefined) {
      const lease = await this.redis.zscore(keys.workers, status.workerId).catch(() => null);
      return lease === null ? status : { ...status, leaseExpiresAt: Number(lease) };
    }
    if (status.state === 'delayed') {
      // Promoted since (its due time came): it waits in its client's list now. Its entry is kept beside
      // the index while it waits (see track.lua).
      const entry = await this.redis.get(keys.tracked(id).entry).catch(() => null);
      const due = entry === null ? null : await this.redis.zscore(keys.delayed, entry).catch(() => null);
      if (entry !== null && due === null) {
        const { dueAt: _due, why: _why, ...rest } = status;
        return this.waiting(keys, { ...rest, state: 'pending' });
      }
    }
    return status.state === 'pending' ? this.waiting(keys, status) : status;
  }

  private async waiting(keys: QueueKeys, status: TaskStatus): Promise<TaskStatus> {
    if (status.clientId === undefined) return status;
    const [listed, prioritized] = await Promise.all([
      this.redis.llen(keys.pending(status.clientId)).catch(() => 0),
      this.redis.zcard(keys.priority(status.clientId)).catch(() => 0),
    ]);
    return { ...status, clientPending: listed + prioritized };
  }
}

function checkId(id: unknown): void {
  if (typeof id !== 'string' || id.length === 0 || id.length > 512) {
    throw new InvalidTaskError(`a task id must be a non-empty string of at most 512 characters, got ${describe(id)}`);
  }
}

/** A stored JSON value, or undefined when it is not JSON (a stray write). */
function parseJson(json: string): unknown {
  try {
    return JSON.parse(json) as unknown;
  } catch {
    return undefined;
  }
}
