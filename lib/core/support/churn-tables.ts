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
 * A slot array and a dictionary-mode object do not link old storage to new: what they drop is gone.
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

/** A table from string ids to values, backed by a dictionary-mode object (`Object.create(null)`). */
export class IdTable<V> {
  private readonly entries: Record<string, V | undefined> = Object.create(null) as Record<string, V | undefined>;
  private count = 0;

  get size(): number {
    return this.count;
  }

  get(id: string): V | undefined {
    return this.entries[id];
  }

  has(id: string): boolean {
    return this.entries[id] !== undefined;
  }

  /** Sets the value of `id` (`undefined` is not a value: `delete` removes an id). */
  set(id: string, value: V): void {
    if (this.entries[id] === undefined) this.count++;
    this.entries[id] = value;
  }

  /** Removes `id`; true when it was there. */
  delete(id: string): boolean {
    if (this.entries[id] === undefined) return false;
    delete this.entries[id];
    this.count--;
    return true;
  }

  /** The values held now (a copy). */
  values(): V[] {
    const values: V[] = [];
    for (const id in this.entries) values.push(this.entries[id] as V);
    return values;
  }

  /** The ids held now (a copy). */
  ids(): string[] {
    return Object.keys(this.entries);
  }
}
