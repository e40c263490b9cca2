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

/** Highest maxAttempts. */
export const MAX_ATTEMPTS = 1_000_000;
/** Longest backoff delay (ms): a year. */
export const MAX_BACKOFF_MS = 31_536_000_000;

/** What is wrong with a retry setting: the field (relative to where it was given), why, and the value. */
export interface RetryProblem {
  /** '' for the value itself, else `.type`, `.delayMs`, ... */
  readonly field: string;
  readonly problem: string;
  readonly value: unknown;
}

/** Why `value` is not a maxAttempts, or undefined. Pure: the config rules and the codec word it. */
export function maxAttemptsProblem(value: unknown): RetryProblem | undefined {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > MAX_ATTEMPTS) {
    return { field: '', problem: `must be an integer from 1 to ${MAX_ATTEMPTS}`, value };
  }
  return undefined;
}

/** Why `value` is not a backoff, or undefined. */
export function backoffProblem(value: unknown): RetryProblem | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return { field: '', problem: "must be { type: 'fixed' | 'exponential', delayMs, maxDelayMs?, jitter? }", value };
  }
  const { type, delayMs, maxDelayMs, jitter } = value as Record<string, unknown>;
  if (type !== 'fixed' && type !== 'exponential') {
    return { field: '.type', problem: "must be 'fixed' or 'exponential'", value: type };
  }
  for (const [name, n] of [
    ['delayMs', delayMs],
    ['maxDelayMs', maxDelayMs],
  ] as const) {
    if (n === undefined && name === 'maxDelayMs') continue;
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 0 || n > MAX_BACKOFF_MS) {
      return { field: `.${name}`, problem: 'must be an integer number of milliseconds from 0 to one year', value: n };
    }
  }
  if (jitter !== undefined && (typeof jitter !== 'number' || !(jitter >= 0 && jitter <= 1))) {
    return { field: '.jitter', problem: 'must be a number from 0 to 1', value: jitter };
  }
  return undefined;
}

/** Longest extension a handler may ask for at once (`ctx.extendLease(ms)`): a day. */
export const MAX_LEASE_EXTENSION_MS = 86_400_000;

/** Why `value` is not a retry delay a handler may ask for (`ctx.retry({ delayMs })`), or undefined. */
export function retryDelayProblem(value: unknown): string | undefined {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > MAX_BACKOFF_MS) {
    return 'must be an integer number of milliseconds from 0 to one year';
  }
  return undefined;
}

/** Why `ms` is not a lease extension (`ctx.extendLease(ms)`), or undefined. */
export function leaseExtensionProblem(ms: unknown): string | undefined {
  if (typeof ms !== 'number' || !Number.isInteger(ms) || ms < 1 || ms > MAX_LEASE_EXTENSION_MS) {
    return `must be an integer number of milliseconds from 1 to ${MAX_LEASE_EXTENSION_MS}`;
  }
  return undefined;
}

/** What to do with a claimed task before running it. */
export type Admission =
  | { readonly kind: 'run'; readonly attempt: number }
  | { readonly kind: 'dead-letter'; readonly reason: 'interrupted' | 'expired'; readonly detail: string };

/**
 * Whether a claimed task may run: not when earlier runs used up its attempts without finishing (the
 * worker died, lost its lease, or shut down during a long run), nor when its expiry time has passed.
 */
export function admit(facts: {
  readonly attempts: number;
  readonly maxAttempts: number;
  readonly expiresAt?: number;
  readonly now: number;
}): Admission {
  const attempt = facts.attempts + 1;
  if (attempt > facts.maxAttempts) {
    return {
      kind: 'dead-letter',
      reason: 'interrupted',
      detail:
        `${facts.attempts} run(s) were interrupted before finishing (the worker died, lost its lease, or shut down during a run longer than slowRunMs); ` +
        `maxAttempts is ${facts.maxAttempts}`,
    };
  }
  if (facts.expiresAt !== undefined && facts.expiresAt <= facts.now) {
    return {
      kind: 'dead-letter',
      reason: 'expired',
      detail: `expired at ${new Date(facts.expiresAt).toISOString()} before a worker could start it`,
    };
  }
  return { kind: 'run', attempt };
}

/** What to do with a task whose run failed. */
export type Decision =
  | { readonly kind: 'retry'; readonly delayMs: number }
  | { readonly kind: 'dead-letter'; readonly reason: 'failed' | 'timeout' | 'rejected'; readonly detail: string };

/** What the handler asked for instead of the policy's choice (`ctx.retry()`, `ctx.deadLetter()`, or their errors). */
export type HandlerRequest =
  { readonly kind: 'retry'; readonly delayMs?: number } | { readonly kind: 'dead-letter'; readonly detail: string };

/**
 * After a failed run: dead letters when the handler asked for it (reason `rejected`), when the error says
 * not to retry, or when this was the last attempt (reason `timeout` when the run passed its handler
 * timeout); else a retry, after the delay the handler asked for or the policy's backoff. A retry the
 * handler asks for counts as an attempt like any other, so a task cannot be retried for ever.
 */
export function decide(
  failure: {
    readonly attempt: number;
    readonly nonRetryable: boolean;
    readonly timedOut: boolean;
    readonly requested?: HandlerRequest;
  },
  policy: RetryPolicy,
  random = Math.random,
): Decision {
  const requested = failure.requested;
  if (requested?.kind === 'dead-letter') return { kind: 'dead-letter', reason: 'rejected', detail: requested.detail };
  if (failure.nonRetryable || failure.attempt >= policy.maxAttempts) {
    return {
      kind: 'dead-letter',
      reason: failure.timedOut ? 'timeout' : 'failed',
      detail: failure.nonRetryable
        ? 'non-retryable error'
        : requested
          ? `the handler asked for a retry on the last of ${policy.maxAttempts} attempt(s)`
          : `failed all ${policy.maxAttempts} attempt(s)`,
    };
  }
  return { kind: 'retry', delayMs: requested?.delayMs ?? backoffDelay(policy.backoff, failure.attempt, random) };
}
