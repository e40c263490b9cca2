import { InvalidTaskError } from '../model/errors.js';
import type { BatchStatus } from '../model/batch.js';
import { nameProblem } from '../config/rules.js';
import { describe } from '../support/describe.js';
import { AdminPart } from './part.js';

/** Batches by id: where one is (`get`). Its events not folded yet (within a reaper's sweep) are not counted. */
export class BatchReader extends AdminPart {
  async get(id: string): Promise<BatchStatus> {
    const problem = nameProblem(id);
    if (problem) throw new InvalidTaskError(`getBatch(): the batch id ${problem}, got ${describe(id)}`);
    const fields = (await this.redis.hgetall(this.keys.batch(id).record)) as Record<string, string>;
    const count = (name: string) => Number(fields[name] ?? 0) || 0;
    const [total, succeeded, failed, cancelled] = [
      count('total'),
      count('succeeded'),
      count('dead'),
      count('cancelled'),
    ];
    const state = fields.state;
    return {
      id,
      state: state === 'open' || state === 'sealed' || state === 'cancelled' ? state : 'unknown',
      total,
      pending: Math.max(0, total - succeeded - failed - cancelled),
      succeeded,
      failed,
      cancelled,
      callback: fields.callbacks !== undefined ? 'enqueued' : fields.fired !== undefined ? 'fired' : 'waiting',
      ...(fields.callbacks ? { callbackIds: fields.callbacks.split(',') } : {}),
      ...(fields.created ? { createdAt: Number(fields.created) } : {}),
      ...(fields.fired ? { firedAt: Number(fields.fired) } : {}),
    };
  }
}
