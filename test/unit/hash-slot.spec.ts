import { describe, expect, it } from '@jest/globals';
import { fnv1a, hashSlot } from '../../lib/core/redis/hash-slot.js';
import { PrefixKeys, shardTag } from '../../lib/core/redis/keys.js';

describe('hashSlot', () => {
  it('is CRC16/XMODEM modulo 16384 (check value of "123456789" is 0x31C3)', () => {
    expect(hashSlot('123456789')).toBe(0x31c3 % 16_384);
  });

  it('hashes only the first non-empty hash tag, like Redis Cluster', () => {
    expect(hashSlot('{user1000}.following')).toBe(hashSlot('user1000'));
    expect(hashSlot('foo{}{bar}')).not.toBe(hashSlot('bar'));
    expect(hashSlot('foo{{bar}}zap')).toBe(hashSlot('{bar'));
  });
});

describe('shard layout', () => {
  it('places shard k of N in the k-th of N equal slot ranges, and an unsharded queue under prefix:{queue}', () => {
    expect(shardTag('mail', 0, 1)).toBe('{mail}');
    expect(new PrefixKeys('tasks').queue('mail').ring).toBe('tasks:{mail}:ring');
    for (const count of [2, 3, 7]) {
      for (let shard = 0; shard < count; shard++) {
        const slot = hashSlot(shardTag('mail', shard, count));
        expect(slot).toBeGreaterThanOrEqual(Math.floor((shard * 16_384) / count));
        expect(slot).toBeLessThan(Math.floor(((shard + 1) * 16_384) / count));
      }
    }
  });

  it('keeps each client in one shard and spreads clients over all of them', () => {
    const layout = new PrefixKeys('tasks').layout('mail', 4);
    const used = new Set(Array.from({ length: 200 }, (_, n) => layout.shardOf(`tenant-${n}`).shard));
    expect(used).toEqual(new Set([0, 1, 2, 3]));
    expect(layout.shardOf('tenant-7')).toBe(layout.shardOf('tenant-7'));
    expect(layout.shardOf('tenant-7').shard).toBe(fnv1a('tenant-7') % 4);
  });
});
