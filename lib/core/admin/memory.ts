import { Cluster, type Redis } from 'ioredis';
import type { RedisConnection } from '../redis/scripts.js';

/** How full Redis is (on a Cluster, its fullest primary), from `INFO memory`. */
export interface RedisMemory {
  /** Bytes in use (`used_memory`). */
  readonly usedBytes: number;
  /** The limit (`maxmemory`; 0: none). */
  readonly maxBytes: number;
  /**
   * At the limit with a policy that evicts nothing: Redis refuses enqueues (`RedisFullError`) while workers
   * go on draining it. False when there is no limit, or INFO is not allowed (`readable: false`).
   */
  readonly full: boolean;
  /** False when the ACL user may not run INFO (the figures are then 0). */
  readonly readable: boolean;
}

/** Reads `INFO memory` of every primary; the fullest one's figures (by share of its limit). */
export async function readMemory(connection: RedisConnection): Promise<RedisMemory> {
  const nodes: Redis[] = connection instanceof Cluster ? connection.nodes('master') : [connection as Redis];
  let fullest: RedisMemory = { usedBytes: 0, maxBytes: 0, full: false, readable: true };
  for (const node of nodes) {
    let info: string;
    try {
      info = await node.info('memory');
    } catch {
      return { usedBytes: 0, maxBytes: 0, full: false, readable: false };
    }
    const field = (name: string) => Number(new RegExp(`^${name}:(\\S+)`, 'm').exec(info)?.[1] ?? 0);
    const policy = new RegExp('^maxmemory_policy:(\\S+)', 'm').exec(info)?.[1] ?? 'noeviction';
    const usedBytes = field('used_memory');
    const maxBytes = field('maxmemory');
    const full = maxBytes > 0 && usedBytes >= maxBytes && policy === 'noeviction';
    const share = (memory: RedisMemory) => (memory.maxBytes > 0 ? memory.usedBytes / memory.maxBytes : 0);
    const reading = { usedBytes, maxBytes, full, readable: true };
    if (full || share(reading) > share(fullest)) fullest = reading;
  }
  return fullest;
}
