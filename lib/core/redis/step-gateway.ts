import type { QueueKeys } from './keys.js';
import type { TaskRedis } from './scripts.js';

/** What a task's steps hash holds (scripts/include/steps.lua), as read. */
export type StoredSteps = Readonly<Record<string, string>>;

/** What saveStep answered: saved (or saved before: the first result is kept), the failures so far, or not held. */
export type StepSaved = { readonly kind: 'saved' } | { readonly kind: 'failures'; readonly count: number } | 'lost';

/**
 * The durable steps of a running task (`ctx.step`, `ctx.checkpoint`): a read of what earlier runs saved, and
 * saveStep-1.lua, which writes only while the worker holds the task under its fencing token.
 */
export class StepGateway {
  constructor(private readonly redis: TaskRedis) {}

  /** Every saved result, failure count and checkpoint of a task (empty when it has none). */
  load(keys: QueueKeys, taskId: string): Promise<StoredSteps> {
    return this.redis.hgetall(keys.steps(taskId)) as Promise<StoredSteps>;
  }

  /** saveStep: a result, a checkpoint or a failure, fenced on the run's token; `keepMs` the steps' TTL. */
  async save(
    keys: QueueKeys,
    workerId: string,
    token: string,
    write: {
      readonly taskId: string;
      readonly what: 'result' | 'checkpoint' | 'failure';
      readonly name: string;
      readonly value: string;
      readonly keepMs: number;
    },
  ): Promise<StepSaved> {
    const answer = await this.redis.saveStep(
      keys.base,
      workerId,
      token,
      write.taskId,
      write.what,
      write.name,
      write.value,
      write.keepMs,
    );
    if (answer === 0) return 'lost';
    return write.what === 'failure' ? { kind: 'failures', count: answer } : { kind: 'saved' };
  }
}
