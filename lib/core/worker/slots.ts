/**
 * Handler slots of one worker, shared by all its patterns' claim loops (`concurrency`). Each pattern takes
 * them through its own `PatternSlots`, which adds its cap (`patternConcurrency`, or the handler's
 * `concurrency` extra) and fairness: a pattern waiting for a slot while holding less than its fair share
 * (`concurrency` ÷ the patterns busy or waiting) has the next freed slot kept for it, so a flood of slow
 * tasks on one pattern holds back another pattern's task for at most one task's run, never the flood's.
 * A loop takes slots only after it knows which client to claim from, so a loop blocked on an empty queue
 * never holds slots that another queue's loop could use.
 */
export class Slots {
  private used = 0;
  private waiters: (() => void)[] = [];
  /** The patterns drawing on this pool: one entry per pattern, made at start-up (not a churning table). */
  private readonly patterns: PatternSlots[] = [];
  /** Order in which patterns started waiting (the earlier waiter goes first). */
  private waitOrder = 0;

  constructor(readonly size: number) {}

  get free(): number {
    return this.size - this.used;
  }

  get inUse(): number {
    return this.used;
  }

  /** The slots of one pattern: at most `cap` of the pool (0: no cap of its own). */
  forPattern(cap = 0): PatternSlots {
    const slots = new PatternSlots(this, cap);
    this.patterns.push(slots);
    return slots;
  }

  /** Resolves at the next change: a slot released, a pattern's wait given up, or wakeAll. */
  nextChange(): Promise<void> {
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** How many of the free slots `asker` may take now (see the class comment). */
  availableTo(asker: PatternSlots): number {
    let free = this.free;
    if (asker.cap > 0) free = Math.min(free, asker.cap - asker.used);
    if (free <= 0 || this.patterns.length === 1) return Math.max(0, free);
    let active = 0;
    for (const pattern of this.patterns) if (pattern.used > 0 || pattern.waitingSince !== undefined) active++;
    const share = Math.max(1, Math.floor(this.size / Math.max(1, active)));
    let kept = 0;
    for (const other of this.patterns) {
      const since = other.waitingSince;
      if (other === asker || since === undefined || other.used >= share) continue;
      if (other.cap > 0 && other.used >= other.cap) continue;
      // Two waiting below their share: the one that waited first goes first.
      if (asker.waitingSince !== undefined && asker.waitingSince < since) continue;
      kept++;
    }
    return Math.max(0, Math.min(free, this.free - kept));
  }

  /** @internal PatternSlots' bookkeeping. */
  taken(count: number): void {
    this.used += count;
  }

  release(count = 1): void {
    this.used -= count;
    if (this.free > 0) this.wakeAll();
  }

  /** @internal A pattern began waiting: its place in line. */
  nextWaitOrder(): number {
    return ++this.waitOrder;
  }

  /** Wakes every waiter (a slot freed, a wait given up, or the worker stops, so no loop stays parked). */
  wakeAll(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const wake of waiters) wake();
  }
}

/** One pattern's view of the worker's slots (shared by the claim loops of its shards). */
export class PatternSlots {
  used = 0;
  /** Set while one of its loops waits for a slot with tasks to run: its place in line. */
  waitingSince: number | undefined;

  constructor(
    private readonly pool: Slots,
    /** Most of the pool this pattern may hold (0: no cap of its own). */
    readonly cap: number,
  ) {}

  /** Slots this pattern may take now. */
  get free(): number {
    return this.pool.availableTo(this);
  }

  /**
   * Resolves when this pattern may take a slot, or at the next change of the pool (callers look at `free`
   * again). While it waits, the next slot freed is kept for it if it holds less than its fair share.
   */
  whenFree(): Promise<void> {
    if (this.free > 0) return Promise.resolve();
    this.waitingSince ??= this.pool.nextWaitOrder();
    return this.pool.nextChange();
  }

  /** Takes up to `max` of the slots it may take and returns how many it took (possibly 0). */
  take(max: number): number {
    const taken = Math.max(0, Math.min(max, this.free));
    if (taken > 0) {
      this.used += taken;
      this.pool.taken(taken);
      this.waitingSince = undefined;
    }
    return taken;
  }

  release(count = 1): void {
    if (count <= 0) return;
    this.used -= count;
    this.pool.release(count);
  }

  /** Its loop waits on Redis now, not for a slot: the slot kept for it goes to others. */
  notWaiting(): void {
    if (this.waitingSince === undefined) return;
    this.waitingSince = undefined;
    if (this.pool.free > 0) this.pool.wakeAll();
  }

  /** Wakes every loop waiting on the pool (used when a loop stops, so none stays parked). */
  wakeAll(): void {
    this.waitingSince = undefined;
    this.pool.wakeAll();
  }
}
