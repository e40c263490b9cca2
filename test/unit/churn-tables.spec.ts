import { describe, expect, it } from '@jest/globals';
import { IdTable, SlotSet } from '../../lib/core/support/churn-tables.js';

describe('SlotSet', () => {
  it('holds what was added until its own slot is deleted, and reuses freed slots', () => {
    const set = new SlotSet<{ name: string }>();
    const a = { name: 'a' };
    const b = { name: 'b' };
    const slotA = set.add(a);
    const slotB = set.add(b);
    expect(set.size).toBe(2);
    expect(set.values()).toEqual([a, b]);
    expect(set.delete(slotA, a)).toBe(true);
    expect(set.has(slotA, a)).toBe(false);
    expect(set.values()).toEqual([b]);
    const c = { name: 'c' };
    expect(set.add(c)).toBe(slotA);
    expect(set.values()).toEqual([c, b]);
    expect(set.size).toBe(2);
    expect(set.has(slotB, b)).toBe(true);
  });

  it('ignores a second delete of a slot another item took since (the first item is gone already)', () => {
    const set = new SlotSet<string>();
    const slot = set.add('first');
    set.delete(slot, 'first');
    expect(set.add('second')).toBe(slot);
    expect(set.delete(slot, 'first')).toBe(false);
    expect(set.values()).toEqual(['second']);
    expect(set.size).toBe(1);
  });

  it('gives back the storage of a burst once empty, and still refuses the handles of items gone', () => {
    const set = new SlotSet<number>();
    const burst = Array.from({ length: 1_000 }, (_, n) => [set.add(n), n] as const);
    for (const [slot, n] of burst) set.delete(slot, n);
    expect(set.size).toBe(0);
    expect(set.add(5_000)).toBe(0);
    expect(set.delete(0, 0)).toBe(false); // slot 0 held item 0 before: now it holds 5,000
    expect(set.values()).toEqual([5_000]);
  });

  it('gives a copy from values(), so deleting while going through it is safe', () => {
    const set = new SlotSet<number>();
    const slots = [1, 2, 3].map((n) => [set.add(n), n] as const);
    for (const n of set.values()) {
      const [slot] = slots[n - 1];
      set.delete(slot, n);
    }
    expect(set.size).toBe(0);
    expect(set.values()).toEqual([]);
  });
});

describe('IdTable', () => {
  it('maps ids to values and counts them', () => {
    const table = new IdTable<number>();
    table.set('b7', 1);
    table.set('a3', 2);
    table.set('b7', 3); // replaced, not counted twice
    expect(table.size).toBe(2);
    expect(table.get('b7')).toBe(3);
    expect(table.has('a3')).toBe(true);
    expect(table.values().sort()).toEqual([2, 3]);
    expect(table.ids().sort()).toEqual(['a3', 'b7']);
    expect(table.delete('b7')).toBe(true);
    expect(table.delete('b7')).toBe(false);
    expect(table.size).toBe(1);
    expect(table.get('b7')).toBeUndefined();
  });

  it('takes any string as an id, those of Object.prototype included', () => {
    const table = new IdTable<string>();
    for (const id of ['__proto__', 'constructor', 'toString', 'hasOwnProperty', '', '0']) {
      expect(table.has(id)).toBe(false);
      table.set(id, `value of ${id}`);
    }
    expect(table.size).toBe(6);
    expect(table.get('__proto__')).toBe('value of __proto__');
    expect(table.get('constructor')).toBe('value of constructor');
    expect(table.delete('toString')).toBe(true);
    expect(table.size).toBe(5);
  });

  it('tells apart ids that end alike (they hash alike, and are compared whole)', () => {
    const table = new IdTable<number>();
    const ids = Array.from({ length: 200 }, (_, i) => `${i}-prefix-that-differs-only-here-0123456789`);
    ids.forEach((id, i) => table.set(id, i));
    expect(table.size).toBe(200);
    ids.forEach((id, i) => expect(table.get(id)).toBe(i));
    for (const id of ids.slice(0, 100)) expect(table.delete(id)).toBe(true);
    expect(ids.map((id) => table.has(id))).toEqual(ids.map((_, i) => i >= 100));
  });

  it('keeps every id through growth, deletions and reuse of deleted slots, and shrinks once empty', () => {
    const table = new IdTable<number>();
    const held = new Map<string, number>();
    // A churn like send()'s: ids come in order and go in another, with a few hundred held at most.
    for (let i = 0; i < 5_000; i++) {
      const id = `tXn2Qp${i.toString(36)}`;
      table.set(id, i);
      held.set(id, i);
      if (i % 3 !== 0) {
        const gone = `tXn2Qp${Math.floor(i * 0.9).toString(36)}`;
        expect(table.delete(gone)).toBe(held.delete(gone));
      }
      if (i % 500 === 0) {
        expect(table.size).toBe(held.size);
        for (const [key, value] of held) expect(table.get(key)).toBe(value);
      }
    }
    expect(table.values().sort((a, b) => a - b)).toEqual([...held.values()].sort((a, b) => a - b));
    expect(table.ids().sort()).toEqual([...held.keys()].sort());
    for (const key of held.keys()) expect(table.delete(key)).toBe(true);
    expect(table.size).toBe(0);
    expect(table.get('tXn2Qp0')).toBeUndefined();
    expect((table as unknown as { ids_: unknown[] }).ids_.length).toBe(16);
  });
});
