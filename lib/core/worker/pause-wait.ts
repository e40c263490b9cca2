import { sleep } from '../support/logger.js';

/**
 * The wait of a loop that found its queue paused: until a resume is announced, re-checking after a
 * timeout in case the announcement was missed. Both calls of a loop may find the queue paused; they
 * share one wait.
 */
export class PauseWait {
  private wake: (() => void) | undefined;
  private waiting: Promise<void> | undefined;

  constructor(
    private readonly timeoutMs: number,
    private readonly signal: AbortSignal,
  ) {}

  wait(): Promise<void> {
    this.waiting ??= new Promise<void>((resolve) => {
      this.wake = resolve;
      void sleep(this.timeoutMs, this.signal).then(resolve);
    }).finally(() => {
      this.wake = undefined;
      this.waiting = undefined;
    });
    return this.waiting;
  }

  /** The resume was announced: the wait ends at once. */
  resume(): void {
    this.wake?.();
  }
}
