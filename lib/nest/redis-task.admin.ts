import { Injectable } from '@nestjs/common';
import { TaskAdmin, type DeadLetterSelection, type RequeueDeadLettersResult } from '../core/admin.js';
import type { DeadLetterRecord } from '../core/dead-letter.js';
import { PrefixKeys } from '../core/keys.js';
import { ShardCounts } from '../core/shard-counts.js';
import { RedisTaskClient } from './redis-task.client.js';

/**
 * Operations on queues: dead letters (list, requeue with attempts reset, purge). Injectable from
 * `RedisTaskModule`; without Nest, `new RedisTaskAdmin(new RedisTaskClient(options))`.
 */
@Injectable()
export class RedisTaskAdmin {
  constructor(private readonly client: RedisTaskClient) {}

  async queues(): Promise<string[]> {
    return (await this.core()).queues();
  }

  async listDeadLetters(pattern: string, page?: { offset?: number; limit?: number }): Promise<DeadLetterRecord[]> {
    return (await this.core()).listDeadLetters(pattern, page);
  }

  async countDeadLetters(pattern: string): Promise<number> {
    return (await this.core()).countDeadLetters(pattern);
  }

  /** `'all'`, or `{ ids: [...] }` for one or some tasks. */
  async requeueDeadLetters(pattern: string, selection: DeadLetterSelection): Promise<RequeueDeadLettersResult> {
    return (await this.core()).requeueDeadLetters(pattern, selection);
  }

  async purgeDeadLetters(pattern: string, selection: DeadLetterSelection): Promise<number> {
    return (await this.core()).purgeDeadLetters(pattern, selection);
  }

  private async core(): Promise<TaskAdmin> {
    const redis = await this.client.connect();
    const keys = new PrefixKeys(this.client.options.prefix);
    return new TaskAdmin(redis, keys, new ShardCounts(redis, keys, 'recorded'));
  }
}
