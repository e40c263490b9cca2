import { validateClientId, validateRate, validateWeight } from '../config/rules.js';
import { SettingsWriter } from '../redis/settings-writer.js';
import { AdminPart } from './part.js';

export { MAX_WEIGHT } from '../config/rules.js';

/** What operators change on a running queue: client weights and rate limits, pause and resume. */
export class QueueSettings extends AdminPart {
  private readonly writer = new SettingsWriter(this.redis);

  /**
   * Gives a client a share of claims proportional to its weight (1 to 1,000; 1, the default, removes
   * it): a client of weight 3 gets three tasks for every one of a client of weight 1 while both have work.
   */
  async setClientWeight(queue: string, clientId: string, weight: number): Promise<void> {
    validateClientId('clientId', clientId);
    validateWeight('weight', weight);
    await this.writer.weight((await this.layouts.layout(queue)).shardOf(clientId), clientId, weight);
  }

  /**
   * Limits how many tasks of one client start per second (overriding the pattern's `clientRateLimit`),
   * or removes the override with null.
   */
  async setClientRateLimit(queue: string, clientId: string, rate: number | null): Promise<void> {
    validateClientId('clientId', clientId);
    if (rate !== null) validateRate('rate', rate);
    await this.writer.rate((await this.layouts.layout(queue)).shardOf(clientId), clientId, rate);
  }

  /** Clients whose weight is not 1. */
  async clientWeights(queue: string): Promise<Record<string, number>> {
    const weights: Record<string, number> = {};
    for (const keys of await this.shards(queue)) {
      for (const [clientId, weight] of Object.entries(
        (await this.redis.hgetall(keys.weights)) as Record<string, string>,
      )) {
        weights[clientId] = Number(weight);
      }
    }
    return weights;
  }

  /** Workers stop claiming from the queue (tasks running finish; producers still enqueue). */
  async pause(queue: string): Promise<void> {
    for (const keys of await this.shards(queue)) {
      await this.writer.pause(keys);
    }
  }

  /** Workers claim from the queue again; blocked loops are told at once. */
  async resume(queue: string): Promise<void> {
    for (const keys of await this.shards(queue)) {
      await this.writer.resume(keys);
    }
  }
}
