/**
 * Handler slots of one worker, shared by all its patterns' claim loops (`concurrency`). Each pattern takes
 * them through its own `PatternSlots`, which adds its cap (`patternConcurrency`, or the handler's
 * `concurrency` extra) and fairness: while another pattern is idle, a pattern holding its share of all
 * patterns (`concurrency` ÷ patterns) leaves `idleSlots` free, so the idle pattern's next task starts at once,
 * not after a slow flood's run; and a pattern waiting for a slot while holding less than its fair share
 * (`concurrency` ÷ the patterns busy or waiting) has the next freed slot kept for it, so several busy patterns
 * converge on equal shares. With one pattern nothing is kept.
 * A loop takes slots only after it knows which client to claim from, so a loop blocked on an empty queue
 * never holds slots that another queue's loop could use.
 */
export class Slots {
  private used = 0;
  private waiters: (() => void)[] = [];
  /** The patterns drawing on this pool: one entry per pattern, made at start-up (not a churning table). */
  private readonly patterns: PatternSlots[] = [];
  // table-ok: one entry per pattern the worker consumes, made at start-up
  private readonly named = new Map<string, PatternSlots>();
  /** Order in which patterns started waiting (the earlier waiter goes first). */
  private waitOrder = 0;

  constructor(
    readonly size: number,
    /** Slots kept free for idle patterns while another holds its share of all (see the class comment). */
    private readonly idleSlots = 0,
  ) {}

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

  /** The slots of a named pattern, made once (the loops of its shards share them). */
  ofPattern(pattern: string, cap: number): PatternSlots {
    let slots = this.named.get(pattern);
    if (!slots) {
      slots = this.forPattern(cap);
      this.named.set(pattern, slots);
    }
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
    let idle = false;
    for (const pattern of this.patterns) {
      if (pattern.used > 0 || pattern.waitingSince !== undefined || pattern === asker) active++;
      else idle = true;
    }
    const share = Math.max(1, Math.floor(this.size / Math.max(1, active)));
    // While another pattern is idle, one past its share of all patterns leaves a slot free for it: a task of
    // the idle pattern then starts at once, not after one of a flood's (however long) runs.
    const shareOfAll = Math.max(1, Math.floor(this.size / this.patterns.length));
    if (idle && this.idleSlots > 0)
      free = Math.min(free, Math.max(shareOfAll - asker.used, this.free - this.idleSlots));
    let kept = 0;
    for (const other of this.patterns) {
      const since = other.waitingSince;
      if (other === asker || since === undefined || other.used >= share) continue;
      if (other.cap > 0 && other.used >= other.cap) continue;
      // One at or above its share yields to it; two waiting below their share: the one that waited first goes first.
      if (asker.used < share && asker.waitingSince !== undefined && asker.waitingSince < since) continue;
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
   * again). With `demand` (the loop has tasks to claim, as far as it knows), the next slot freed is kept for
   * it while it holds less than its fair share; without (a loop whose queue looked empty, wanting a slot to
   * claim with once woken), it keeps nothing from others.
   */
  whenFree(demand = true): Promise<void> {
    if (this.free > 0) return Promise.resolve();
    if (demand) this.waitingSince ??= this.pool.nextWaitOrder();
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
