import type { CoalesceMode } from './codec.js';

export type { CoalesceMode };

/**
 * How emits that share a coalescing key combine (latest wins; see `RedisTaskRecordBuilder.setCoalesceKey`):
 * - `replace` (default): a waiting task of the key takes the new payload in place (keeps its place in line);
 * - `debounce`: runs `delayMs` after the last emit of the key, never later than `maxWaitMs` after the first;
 * - `keep-last`: at most one running and one waiting per key: a new emit replaces the waiting one;
 * - `supersede`: as keep-last, and the running one is cancelled through its fence (its `ctx.signal`
 *   aborts, its late outcome is refused).
 */
export interface CoalesceOptions {
  readonly mode?: CoalesceMode;
  /** debounce only: how long after the last emit the task runs (ms, required). */
  readonly delayMs?: number;
  /** debounce only: the longest a task waits after the first emit of its window (ms; default 10 × delayMs). */
  readonly maxWaitMs?: number;
}

/** A checked coalescing key and its settings, as a prepared task carries them. */
export interface CoalesceSettings {
  readonly key: string;
  readonly mode: CoalesceMode;
  /** debounce: the delay after each emit (ms); 0 otherwise. */
  readonly delayMs: number;
  /** debounce: the longest wait after the first emit (ms); 0 otherwise. */
  readonly maxWaitMs: number;
}
