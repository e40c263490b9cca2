import { InvalidOptionError } from './errors.js';
import { describe } from './options-describe.js';

/** How long to wait before the next attempt of a failed task. */
export interface BackoffOptions {
  /** `fixed`: always `delayMs`; `exponential`: `delayMs * 2^(attempt-1)`, capped by `maxDelayMs`. */
  readonly type: 'fixed' | 'exponential';
  readonly delayMs: number;
  /** Upper bound of an exponential delay. Default 1 hour. */
  readonly maxDelayMs?: number;
  /** Fraction of the delay randomised away (0 = none, 0.5 = between half and all of it). Default 0.5. */
  readonly jitter?: number;
}

/** Attempts and backoff of a task: set per transport, per pattern (handler extras) or per record. */
export interface RetryOptions {
  /** Runs a task may have in all, the first included; after the last, it goes to dead letters. */
  readonly maxAttempts?: number;
  readonly backoff?: BackoffOptions;
}

export interface RetryPolicy {
  readonly maxAttempts: number;
  readonly backoff: Required<BackoffOptions>;
}

export const DEFAULT_RETRY_POLICY: RetryPolicy = {
  maxAttempts: 3,
  backoff: { type: 'exponential', delayMs: 1_000, maxDelayMs: 3_600_000, jitter: 0.5 },
};

/** Delay before attempt `attempt + 1`, after `attempt` runs failed. */
export function backoffDelay(backoff: Required<BackoffOptions>, attempt: number, random = Math.random): number {
  const base =
    backoff.type === 'fixed'
      ? backoff.delayMs
      : Math.min(backoff.maxDelayMs, backoff.delayMs * 2 ** Math.max(0, attempt - 1));
  return Math.round(base * (1 - backoff.jitter * random()));
}

/** Fixed means fixed: jitter is opt-in there; exponential backoff spreads retries by 0.5 unless told. */
export function defaultJitter(type: BackoffOptions['type']): number {
  return type === 'fixed' ? 0 : DEFAULT_RETRY_POLICY.backoff.jitter;
}

/** Merges layers, later ones winning (transport < pattern < record). */
export function mergeRetry(base: RetryPolicy, ...layers: (RetryOptions | undefined)[]): RetryPolicy {
  let policy = base;
  for (const layer of layers) {
    if (!layer) {
      continue;
    }
    policy = {
      maxAttempts: layer.maxAttempts ?? policy.maxAttempts,
      backoff: layer.backoff
        ? {
            type: layer.backoff.type,
            delayMs: layer.backoff.delayMs,
            maxDelayMs: layer.backoff.maxDelayMs ?? DEFAULT_RETRY_POLICY.backoff.maxDelayMs,
            jitter: layer.backoff.jitter ?? defaultJitter(layer.backoff.type),
          }
        : policy.backoff,
    };
  }
  return policy;
}

/** Checks retry settings, throwing an error that names `where` (an option, a pattern, a setter). */
export function validateRetry(where: string, value: unknown, makeError = defaultError): RetryOptions {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw makeError(where, `must be an object, got ${describe(value)}`);
  }
  const { maxAttempts, backoff } = value as Record<string, unknown>;
  if (maxAttempts !== undefined) {
    validateMaxAttempts(`${where}.maxAttempts`, maxAttempts, makeError);
  }
  if (backoff !== undefined) {
    validateBackoff(`${where}.backoff`, backoff, makeError);
  }
  return value as RetryOptions;
}

export function validateMaxAttempts(where: string, value: unknown, makeError = defaultError): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > 1_000_000) {
    throw makeError(where, `must be an integer from 1 to 1000000, got ${describe(value)}`);
  }
  return value;
}

export function validateBackoff(where: string, value: unknown, makeError = defaultError): BackoffOptions {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw makeError(where, `must be { type: 'fixed' | 'exponential', delayMs, maxDelayMs?, jitter? }, got ${describe(value)}`);
  }
  const { type, delayMs, maxDelayMs, jitter } = value as Record<string, unknown>;
  if (type !== 'fixed' && type !== 'exponential') {
    throw makeError(`${where}.type`, `must be 'fixed' or 'exponential', got ${describe(type)}`);
  }
  const nonNegative = (name: string, n: unknown) => {
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 0 || n > 31_536_000_000) {
      throw makeError(`${where}.${name}`, `must be an integer number of milliseconds from 0 to one year, got ${describe(n)}`);
    }
  };
  nonNegative('delayMs', delayMs);
  if (maxDelayMs !== undefined) nonNegative('maxDelayMs', maxDelayMs);
  if (jitter !== undefined && (typeof jitter !== 'number' || !(jitter >= 0 && jitter <= 1))) {
    throw makeError(`${where}.jitter`, `must be a number from 0 to 1, got ${describe(jitter)}`);
  }
  return value as BackoffOptions;
}

function defaultError(where: string, message: string): Error {
  return new InvalidOptionError(where, message);
}
