import { Cluster } from 'ioredis';
import type { ScriptGateway } from '../redis/gateway.js';
import type { QueueKeys } from '../redis/keys.js';
import type { TaskRedis } from '../redis/scripts.js';

/** Keys each audit step looks at, per shard and node (one SCAN step). */
const KEYS_PER_STEP = 1_000;

/**
 * The ring audit: finds clients whose pending tasks no claim can reach (on no ring, not parked at a
 * cap, not throttled), and puts them back (`rejoinClient`, recorded in faults). No script leaves a
 * client so (a generated test holds every script to that), but a hand edit or a lost ring key can, and
 * then nothing else would notice: a new emit for the client does not bring it back (its list is not
 * empty), and stats walk the ring. It is a backstop, not a hot path: each reaper sweep takes one SCAN
 * step of a shard's client keys (MATCH on the shard's base), resuming where the last step ended, so
 * one pass over a database of N keys takes N / 1,000 sweeps and costs Redis one SCAN per sweep.
 */
export class RingAudit {
  /** Where each shard's scan goes on: node index (Cluster primaries) and cursor. */
  // table-ok: one entry per queue shard
  private readonly cursors = new Map<string, { node: number; cursor: string }>();

  constructor(
    private readonly redis: TaskRedis,
    private readonly gateway: ScriptGateway,
    private readonly keysPerStep = KEYS_PER_STEP,
  ) {}

  /** One step over a shard's client keys; the clients put back, with their task counts. */
  async step(keys: QueueKeys): Promise<{ clientId: string; tasks: number }[]> {
    const nodes = this.redis instanceof Cluster ? this.redis.nodes('master') : [this.redis];
    const at = this.cursors.get(keys.base) ?? { node: 0, cursor: '0' };
    const node = nodes[at.node % nodes.length];
    const [next, found] = await node.scan(
      at.cursor,
      'MATCH',
      `${escapeGlob(keys.base)}:p*:*`,
      'COUNT',
      this.keysPerStep,
    );
    this.cursors.set(
      keys.base,
      next === '0' ? { node: (at.node + 1) % nodes.length, cursor: '0' } : { node: at.node, cursor: next },
    );
    const clients = new Set<string>();
    for (const key of found) {
      for (const kind of [':pending:', ':priority:']) {
        if (key.startsWith(keys.base + kind)) clients.add(key.slice(keys.base.length + kind.length));
      }
    }
    const rejoined: { clientId: string; tasks: number }[] = [];
    for (const clientId of clients) {
      const tasks = await this.gateway.rejoinClient(keys, clientId);
      if (tasks > 0) rejoined.push({ clientId, tasks });
    }
    return rejoined;
  }
}

/** A literal for a SCAN MATCH pattern (Redis globs treat * ? [ ] \ as special). */
function escapeGlob(text: string): string {
  return text.replace(/[*?[\]\\]/g, (char) => `\\${char}`);
}
