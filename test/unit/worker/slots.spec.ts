import { describe, expect, it } from '@jest/globals';
import { Slots } from '../../../lib/core/worker/slots.js';

describe('Slots: one pool, each pattern its cap and its fair share', () => {
  it('gives a lone pattern every slot, and keeps nothing at concurrency 1', () => {
    const alone = new Slots(4).forPattern();
    expect(alone.take(10)).toBe(4);
    const pool = new Slots(1);
    const [a, b] = [pool.forPattern(), pool.forPattern()];
    expect(a.take(1)).toBe(1);
    a.release();
    expect(b.take(1)).toBe(1);
  });

  it('keeps no slot for idle patterns with idleSlots 0: one pattern may fill them all', () => {
    const pool = new Slots(10, 0);
    const [flood] = [pool.forPattern(), pool.forPattern()];
    expect(flood.take(10)).toBe(10);
  });

  it('keeps one slot for an idle pattern from one holding its share of all patterns, and lets the idle one take it', () => {
    const pool = new Slots(10, 1);
    const [flood, idle] = [pool.forPattern(), pool.forPattern()];
    expect(flood.take(10)).toBe(9);
    expect(flood.free).toBe(0);
    expect(idle.take(5)).toBe(1); // at once, no run of the flood waited for
    // Both busy now: nothing is kept for anyone idle, and the freed slot goes where it is asked.
    flood.release();
    expect(flood.take(1)).toBe(1);
  });

  it('gives the next freed slot to a waiting pattern below its fair share, before one at or above it', async () => {
    const pool = new Slots(4, 1);
    const [encode, avatar] = [pool.forPattern(), pool.forPattern()];
    expect(encode.take(4)).toBe(3);
    expect(avatar.take(4)).toBe(1);
    const woken = avatar.whenFree(); // it has tasks waiting: it waits for a slot, below its share (2 of 4)
    expect(avatar.waitingSince).toBeDefined();
    encode.release();
    await woken;
    expect(encode.free).toBe(0); // at its share (2) now: it yields the slot
    expect(avatar.take(4)).toBe(1);
    expect(avatar.waitingSince).toBeUndefined();
    encode.release();
    expect(encode.free).toBe(1); // both at their share: the slot is the encoder's again
  });

  it('holds a pattern to its own cap, and waits without keeping anything when it has no demand', () => {
    const pool = new Slots(6);
    const [capped, other] = [pool.forPattern(2), pool.forPattern()];
    expect(capped.take(6)).toBe(2);
    expect(capped.free).toBe(0);
    void capped.whenFree(false);
    expect(capped.waitingSince).toBeUndefined();
    expect(other.take(6)).toBe(4);
  });
});
