import { randomUUID } from 'node:crypto';
import { encodeNewEntry } from './codec.js';
import { InvalidTaskError, PayloadTooLargeError } from './errors.js';
import type { PrefixKeys } from './keys.js';
import type { BackoffOptions } from './retry-policy.js';
import type { TaskRedis } from './scripts.js';

/** One task to enqueue. */
export interface EnqueueItem {
  readonly payload: unknown;
  readonly clientId: string;
  /** Reply channel of a `send()` caller. */
  readonly replyTo?: string;
  /** Task id; generated when absent. */
  readonly id?: string;
  readonly maxAttempts?: number;
  readonly backoff?: BackoffOptions;
}

export interface ProducerOptions {
  readonly maxPayloadBytes: number;
}

export function newTaskId(): string {
  return randomUUID().replaceAll('-', '');
}

/**
 * Enqueues tasks durably: the promise resolves only once Redis has appended them. All items of one
 * call go in one script call (one round trip, all or nothing).
 */
export class TaskProducer {
  constructor(
    private readonly redis: TaskRedis,
    private readonly keys: PrefixKeys,
    private readonly options: ProducerOptions,
  ) {}

  async enqueue(queue: string, items: readonly EnqueueItem[]): Promise<string[]> {
    if (items.length === 0) {
      return [];
    }
    const queueKeys = this.keys.queue(queue);
    const enqueuedAt = Date.now();
    const ids: string[] = [];
    // Group by client, keeping each client's order, so each client list gets one RPUSH.
    const groups = new Map<string, string[]>();
    items.forEach((item, index) => {
      const id = item.id ?? newTaskId();
      const entry = encodeNewEntry(
        { id, clientId: item.clientId, enqueuedAt, replyTo: item.replyTo, maxAttempts: item.maxAttempts, backoff: item.backoff },
        this.serializePayload(item.payload, items.length > 1 ? index : undefined),
      );
      ids.push(id);
      const group = groups.get(item.clientId);
      if (group) {
        group.push(entry);
      } else {
        groups.set(item.clientId, [entry]);
      }
    });
    const keys: string[] = [queueKeys.ring];
    const args: (string | number)[] = [];
    for (const [clientId, entries] of groups) {
      keys.push(queueKeys.pending(clientId));
      args.push(clientId, entries.length, ...entries);
    }
    await this.redis.enqueueTasks(keys.length, ...keys, ...args);
    return ids;
  }

  private serializePayload(payload: unknown, index: number | undefined): string {
    const where = index === undefined ? 'the payload' : `item ${index}'s payload`;
    let json: string | undefined;
    try {
      json = JSON.stringify(payload === undefined ? null : payload);
    } catch (error) {
      throw new InvalidTaskError(`${where} cannot be serialized to JSON: ${(error as Error).message}`);
    }
    if (json === undefined) {
      throw new InvalidTaskError(`${where} cannot be serialized to JSON (got a ${typeof payload})`);
    }
    const bytes = Buffer.byteLength(json);
    if (bytes > this.options.maxPayloadBytes) {
      throw new PayloadTooLargeError(bytes, this.options.maxPayloadBytes);
    }
    return json;
  }
}
