/**
 * Handler slots of one worker, shared by all its claim loops. A loop takes slots only after it knows
 * which client to claim from, so a loop blocked on an empty queue never holds slots that another
 * queue's loop could use.
 */
export class Slots {
  private used = 0;
  private waiters: (() => void)[] = [];

  constructor(readonly size: number) {}

  get free(): number {
    return this.size - this.used;
  }

  get inUse(): number {
    return this.used;
  }

  /** Resolves once at least one slot is free (without taking it). */
  whenFree(): Promise<void> {
    if (this.free > 0) {
      return Promise.resolve();
    }
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** Takes up to `max` free slots and returns how many it took (possibly 0). */
  take(max: number): number {
    const taken = Math.max(0, Math.min(max, this.free));
    this.used += taken;
    return taken;
  }

  release(count = 1): void {
    this.used -= count;
    if (this.free > 0) {
      this.wakeAll();
    }
  }

  /** Wakes every waiter (used when the worker stops, so no loop stays parked). */
  wakeAll(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const wake of waiters) {
      wake();
    }
  }
}
