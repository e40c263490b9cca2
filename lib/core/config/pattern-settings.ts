import { mergeRetry, type RetryPolicy } from '../model/retry-policy.js';
import type { ResolvedTransportOptions } from './options.js';
import {
  validateClientConcurrency,
  validateHandlerTimeout,
  validateMaxAttempts,
  validatePatternConcurrency,
  validateRate,
  validateRetry,
} from './rules.js';

/** What each pattern runs with: the transport's settings, overridden by its handler's extras. */
export interface PatternSettings {
  retryPolicy(pattern: string): RetryPolicy;
  /** Per-client cap on tasks in flight (0: none). */
  clientConcurrency(pattern: string): number;
  /** Tasks per second each client may start (0: no limit). */
  rateLimit(pattern: string): number;
  /** Longest run of a handler (0: none). */
  handlerTimeout(pattern: string): number;
  /** How long a run may go on before it gives its task back at a step boundary (0: no limit). */
  maxRuntime(pattern: string): number;
  /** The runs of its own a durable step has by default (1: every failure counts an attempt of the task). */
  stepAttempts(pattern: string): number;
  /** Most of this worker's handler slots the pattern may hold at once (0: no cap of its own). */
  concurrency(pattern: string): number;
}

/**
 * Reads and checks the handler extras of every pattern (`@EventPattern('p', { maxAttempts: 5 })`)
 * before anything touches Redis: a bad value fails start-up naming the pattern and the extra.
 */
export function patternSettings(
  extrasByPattern: ReadonlyMap<string, Readonly<Record<string, unknown>> | undefined>,
  options: ResolvedTransportOptions,
): PatternSettings {
  const base: RetryPolicy = { maxAttempts: options.maxAttempts, backoff: options.backoff };
  const policies = new Map<string, RetryPolicy>();
  const caps = new Map<string, number>();
  const rates = new Map<string, number>();
  const timeouts = new Map<string, number>();
  const runtimes = new Map<string, number>();
  const stepAttempts = new Map<string, number>();
  const concurrency = new Map<string, number>(Object.entries(options.patternConcurrency));
  for (const [pattern, extras = {}] of extrasByPattern) {
    const where = `extras of pattern "${pattern}"`;
    if (extras.concurrency !== undefined) {
      validatePatternConcurrency(`${where}.concurrency`, extras.concurrency, options.concurrency);
      concurrency.set(pattern, extras.concurrency as number);
    }
    if (extras.maxAttempts !== undefined || extras.backoff !== undefined) {
      policies.set(
        pattern,
        mergeRetry(base, validateRetry(where, { maxAttempts: extras.maxAttempts, backoff: extras.backoff })),
      );
    }
    if (extras.clientConcurrency !== undefined) {
      validateClientConcurrency(`${where}.clientConcurrency`, extras.clientConcurrency);
      caps.set(pattern, extras.clientConcurrency as number);
    }
    if (extras.clientRateLimit !== undefined) {
      validateRate(`${where}.clientRateLimit`, extras.clientRateLimit);
      rates.set(pattern, extras.clientRateLimit as number);
    }
    if (extras.handlerTimeoutMs !== undefined) {
      validateHandlerTimeout(`${where}.handlerTimeoutMs`, extras.handlerTimeoutMs);
      timeouts.set(pattern, extras.handlerTimeoutMs as number);
    }
    if (extras.maxRuntimeMs !== undefined) {
      validateHandlerTimeout(`${where}.maxRuntimeMs`, extras.maxRuntimeMs);
      runtimes.set(pattern, extras.maxRuntimeMs as number);
    }
    if (extras.stepAttempts !== undefined) {
      stepAttempts.set(pattern, validateMaxAttempts(`${where}.stepAttempts`, extras.stepAttempts));
    }
  }
  return {
    retryPolicy: (pattern) => policies.get(pattern) ?? base,
    clientConcurrency: (pattern) => caps.get(pattern) ?? options.clientConcurrency,
    rateLimit: (pattern) => rates.get(pattern) ?? options.clientRateLimit,
    handlerTimeout: (pattern) => timeouts.get(pattern) ?? options.handlerTimeoutMs,
    maxRuntime: (pattern) => runtimes.get(pattern) ?? options.maxRuntimeMs,
    stepAttempts: (pattern) => stepAttempts.get(pattern) ?? options.stepAttempts,
    concurrency: (pattern) => concurrency.get(pattern) ?? 0,
  };
}
