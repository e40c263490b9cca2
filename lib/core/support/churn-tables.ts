/**
 * Tables for what comes and goes once per task (a part waiting for Redis, a run, a caller waiting for
 * its reply), in place of a long-lived `Map` or `Set`.
 *
 * Why: a `Map` or `Set` that gains and loses an entry per task rehashes into a new table every few
 * operations (and `clear()` makes a new one at once), and V8 links each old table to its successor.
 * Once one table was promoted to the old generation (a mark-compact promotes whatever is live then),
 * that dead table kept its successor alive through scavenges, which promoted it in turn, and so on for
 * every later table and the entries each still held, until the next mark-compact. Measured at 10
 * emits per ms on the producer alone: about 600 bytes promoted per emit with a `Set` of waiting parts,
 * 15 without; promoted garbage is what makes mark-compacts, and their pauses, the latency tail.
 *
 * Plain arrays do not link old storage to new: what they drop is gone.
 */

/** A set of items, each deleted by the slot `add` gave it (no hashing, no per-item allocation). */
export class SlotSet<T> {
  private readonly slots: (T | undefined)[] = [];
  /** Free slots, reused last freed first (the array never grows past the most items held at once, and
   * a burst's storage is given back once the set is empty). */
  private readonly free: number[] = [];
  private count = 0;

  get size(): number {
    return this.count;
  }

  /** Adds an item; returns its slot, for `delete`. */
  add(item: T): number {
    const slot = this.free.length > 0 ? (this.free.pop() as number) : this.slots.length;
    this.slots[slot] = item;
    this.count++;
    return slot;
  }

  /** Whether `slot` still holds `item`. */
  has(slot: number, item: T): boolean {
    return item !== undefined && this.slots[slot] === item;
  }

  /** Removes `item` from its slot; false (and nothing changed) when the slot no longer holds it. */
  delete(slot: number, item: T): boolean {
    if (this.slots[slot] !== item || item === undefined) return false;
    this.slots[slot] = undefined;
    this.count--;
    if (this.count === 0 && this.slots.length > 64) {
      // Empty again after a burst: the storage it grew is given back (a later add starts at slot 0).
      this.slots.length = 0;
      this.free.length = 0;
    } else {
      this.free.push(slot);
    }
    return true;
  }

  /** The items held now (a copy: deleting while going through it is safe). */
  values(): T[] {
    const items: T[] = [];
    for (const item of this.slots) if (item !== undefined) items.push(item);
    return items;
  }
}

/**
 * A table from string ids to values: open addressing over two arrays (ids and values), hashed here.
 *
 * Not a dictionary-mode object: a property key is internalized (entered in V8's string table), and a
 * table whose keys are new per task (send() task ids) paid that on every `set`, a microsecond and more
 * per request in a CPU profile of send(). Not a `Map` either (see above). Deleted ids leave tombstones;
 * the arrays are rebuilt, at a size fitting what is held, once ids and tombstones fill half of them.
 */
export class IdTable<V> {
  private ids_: (string | undefined | null)[] = new Array<undefined>(MIN_CAPACITY);
  private values_: (V | undefined)[] = new Array<undefined>(MIN_CAPACITY);
  private count = 0;
  /** Slots of deleted ids (`null` in ids_): skipped by lookups, reused by `set`. */
  private tombstones = 0;

  get size(): number {
    return this.count;
  }

  get(id: string): V | undefined {
    const at = this.find(id);
    return at < 0 ? undefined : this.values_[at];
  }

  has(id: string): boolean {
    return this.find(id) >= 0;
  }

  /** Sets the value of `id` (`undefined` is not a value: `delete` removes an id). */
  set(id: string, value: V): void {
    const ids = this.ids_;
    const mask = ids.length - 1;
    let free = -1;
    for (let at = hashOf(id) & mask; ; at = (at + 1) & mask) {
      const held = ids[at];
      if (held === undefined) {
        if (free < 0) free = at;
        break;
      }
      if (held === null) {
        if (free < 0) free = at;
      } else if (held === id) {
        this.values_[at] = value;
        return;
      }
    }
    if (ids[free] === null) this.tombstones--;
    ids[free] = id;
    this.values_[free] = value;
    this.count++;
    if ((this.count + this.tombstones) * 2 > ids.length) this.rebuild();
  }

  /** Removes `id`; true when it was there. */
  delete(id: string): boolean {
    const at = this.find(id);
    if (at < 0) return false;
    this.ids_[at] = null;
    this.values_[at] = undefined;
    this.count--;
    this.tombstones++;
    if (this.count === 0 && this.ids_.length > MIN_CAPACITY) this.rebuild();
    return true;
  }

  /** The values held now (a copy, in no particular order). */
  values(): V[] {
    const values: V[] = [];
    const ids = this.ids_;
    for (let at = 0; at < ids.length; at++) if (typeof ids[at] === 'string') values.push(this.values_[at] as V);
    return values;
  }

  /** The ids held now (a copy, in no particular order). */
  ids(): string[] {
    const held: string[] = [];
    for (const id of this.ids_) if (typeof id === 'string') held.push(id);
    return held;
  }

  /** The slot holding `id`, or -1. */
  private find(id: string): number {
    const ids = this.ids_;
    const mask = ids.length - 1;
    for (let at = hashOf(id) & mask; ; at = (at + 1) & mask) {
      const held = ids[at];
      if (held === undefined) return -1;
      if (held === id) return at;
    }
  }

  /** New arrays, a power of two at least four times what is held (no tombstones). */
  private rebuild(): void {
    let capacity = MIN_CAPACITY;
    while (capacity < this.count * 4) capacity *= 2;
    const ids = this.ids_;
    const values = this.values_;
    this.ids_ = new Array<undefined>(capacity);
    this.values_ = new Array<undefined>(capacity);
    this.tombstones = 0;
    const mask = capacity - 1;
    for (let from = 0; from < ids.length; from++) {
      const id = ids[from];
      if (typeof id !== 'string') continue;
      let at = hashOf(id) & mask;
      while (this.ids_[at] !== undefined) at = (at + 1) & mask;
      this.ids_[at] = id;
      this.values_[at] = values[from];
    }
  }
}

const MIN_CAPACITY = 16;

/**
 * FNV-1a over the last HASHED code units (UTF-16) and the length: task ids are a per-process prefix and
 * a counter, so their ends tell them apart; ids alike there only probe further (lookups compare ids whole).
 */
function hashOf(id: string): number {
  let hash = 0x811c9dc5 ^ id.length;
  for (let i = Math.max(0, id.length - HASHED); i < id.length; i++)
    hash = Math.imul(hash ^ id.charCodeAt(i), 0x01000193);
  return hash >>> 0;
}

const HASHED = 10;
