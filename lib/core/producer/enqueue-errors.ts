import { isRedisFull, permissionRefusal } from '../redis/refusals.js';
import { RefusedError } from '../redis/connection.js';
import {
  RedisConfigurationError,
  RedisFullError,
  RedisPermissionError,
  RedisUnavailableError,
  ReplicationTimeoutError,
} from '../model/errors.js';
import { scrubRedisError } from '../support/redact.js';
import { ReplicationShortfall, TIMED_OUT, type EnqueuePart } from './enqueue-coalescer.js';
import type { ProducerOptions } from './producer-types.js';

/**
 * How an enqueue that failed is told to its caller: the pattern and the server named, whether the
 * tasks may have been written, what to allow for an ACL refusal; never a command's arguments.
 */
export class EnqueueErrors {
  constructor(
    private readonly prefix: string,
    private readonly options: Pick<ProducerOptions, 'durability' | 'server' | 'enqueueTimeoutMs' | 'watch'>,
  ) {}

  /** Why a part handed to the coalescer was not (or maybe not) written. */
  ofPart(part: EnqueuePart, error: Error | typeof TIMED_OUT | ReplicationShortfall): Error {
    const queue = part.keys.queue;
    if (error === TIMED_OUT) return this.unavailable(queue, 'unknown');
    if (error instanceof ReplicationShortfall) {
      const { replicas, timeoutMs } = this.options.durability ?? { replicas: 0, timeoutMs: 0 };
      return new ReplicationTimeoutError(
        queue,
        error.acknowledged,
        replicas,
        timeoutMs,
        part.tasks.map((task) => task.id),
      );
    }
    return this.mapped(error, queue);
  }

  /**
   * An ACL refusal heals by no retry: say so, with what to allow; a full Redis wrote nothing: say so, with
   * what drains it; any other error loses its arguments.
   */
  mapped(error: unknown, queue: string): Error {
    const refused = permissionRefusal(error);
    if (refused) return new RedisPermissionError(this.prefix, refused.reply, refused.command);
    if (isRedisFull(error)) return new RedisFullError(queue, this.options.server);
    return scrubRedisError(error) as Error;
  }

  /** When a refused connection fails a call at once (see ConnectionWatch.knownRefused). */
  get refusal(): { readonly refusedForMs: number } {
    return { refusedForMs: this.options.enqueueTimeoutMs };
  }

  /**
   * What a wait for the connection that failed fails the call with now, if no wait will help: a refused
   * password or an untrusted certificate (`RedisConfigurationError`), or nothing listening there, never
   * connected or down longer than a restart (`RedisUnavailableError`, `refused`). Undefined: wait on.
   */
  notReady(error: unknown, queue: string): Error | undefined {
    if (error instanceof RedisConfigurationError) return error;
    if (error instanceof RefusedError) return this.unavailable(queue, false, undefined, true);
    return undefined;
  }

  unavailable(
    queue: string,
    written: false | 'unknown',
    reason = this.options.watch.lastError,
    refused = false,
  ): RedisUnavailableError {
    return new RedisUnavailableError(
      queue,
      this.options.server,
      this.options.enqueueTimeoutMs,
      written,
      reason,
      refused,
    );
  }
}
