import { InvalidTaskError } from '../core/errors.js';
import { validateBackoff, validateMaxAttempts, type BackoffOptions } from '../core/retry-policy.js';

/** Per-task settings that override the client's defaults. */
export interface RedisTaskRecordOptions {
  /** The client (tenant) the task belongs to; claims rotate fairly over clients. */
  readonly clientId?: string;
  /** Runs allowed in all for this task (overrides the pattern's and the transport's). */
  readonly maxAttempts?: number;
  /** Retry backoff for this task (overrides the pattern's and the transport's). */
  readonly backoff?: BackoffOptions;
}

/** A payload with per-task settings; pass it to `emit`, `send` or `emitBatch` in place of the payload. */
export class RedisTaskRecord<TData = unknown> {
  constructor(
    readonly data: TData,
    readonly options: RedisTaskRecordOptions = {},
  ) {}
}

export class RedisTaskRecordBuilder<TData = unknown> {
  private options: RedisTaskRecordOptions = {};

  constructor(private data?: TData) {}

  setData(data: TData): this {
    this.data = data;
    return this;
  }

  /** Sets the client id: non-empty, at most 200 characters, no braces, spaces or control characters. */
  setClientId(clientId: string): this {
    if (
      typeof clientId !== 'string' ||
      clientId.length === 0 ||
      clientId.length > 200 ||
      /[{}\s\p{Cc}]/u.test(clientId)
    ) {
      throw new InvalidTaskError(
        `setClientId() needs a non-empty string of at most 200 characters without braces, spaces or control characters, got ${JSON.stringify(clientId)}`,
      );
    }
    this.options = { ...this.options, clientId };
    return this;
  }

  /** Runs allowed in all (the first included): an integer from 1. */
  setMaxAttempts(maxAttempts: number): this {
    validateMaxAttempts('setMaxAttempts()', maxAttempts, taskError);
    this.options = { ...this.options, maxAttempts };
    return this;
  }

  /** Delay before each retry: `{ type: 'fixed' | 'exponential', delayMs, maxDelayMs?, jitter? }`. */
  setBackoff(backoff: BackoffOptions): this {
    validateBackoff('setBackoff()', backoff, taskError);
    this.options = { ...this.options, backoff: { ...backoff } };
    return this;
  }

  build(): RedisTaskRecord<TData> {
    return new RedisTaskRecord(this.data as TData, { ...this.options });
  }
}

function taskError(where: string, message: string): Error {
  return new InvalidTaskError(`${where} ${message}`);
}
