import type { PrefixKeys, QueueKeys } from './keys.js';
import type { TaskRedis } from './scripts.js';

/**
 * The scripts of the deployment's periodic sweep, one method each (like ScriptGateway for the queues):
 * takeSweepTurn (which process sweeps the prefix now) and countUnreachable (whether the ring audit needs a
 * pass over a shard's keys).
 */
export class SweepGateway {
  constructor(private readonly redis: TaskRedis) {}

  /** takeSweepTurn: the number of the turn this process takes now, or 0 when another's goes on (see its header). */
  takeTurn(keys: PrefixKeys, owner: string, turnMs: number): Promise<number> {
    return this.redis.takeSweepTurn(keys.sweepTurn, owner, turnMs);
  }

  /**
   * countUnreachable: the shard's pending count minus the tasks of the clients a claim can reach (0: none
   * stranded that the count knows of; -1 when more than `limit` clients are in reach, not counted), and the
   * value of `auditWanted` if a claim set it.
   */
  async countUnreachable(keys: QueueKeys, limit: number): Promise<{ gap: number; wanted?: string }> {
    const [gap, wanted] = await this.redis.countUnreachable(keys.base, limit);
    return typeof wanted === 'string' ? { gap, wanted } : { gap };
  }

  /** releaseLock on `auditWanted`: the pass it asked for is done, unless a claim asked again since. */
  async auditDone(keys: QueueKeys, wanted: string): Promise<void> {
    await this.redis.releaseLock(keys.auditWanted, wanted);
  }
}
