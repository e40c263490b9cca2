import { Cluster } from 'ioredis';
import type { ScriptGateway } from '../redis/gateway.js';
import type { QueueKeys } from '../redis/keys.js';
import type { TaskRedis } from '../redis/scripts.js';

/** Keys each audit step looks at, per shard and node (one SCAN step). */
const KEYS_PER_STEP = 1_000;

/** A pass over a shard's client keys under way: where its scan is, what it put back, and why it started. */
interface Pass {
  node: number;
  cursor: string;
  rejoined: number;
  /** The count's gap when it started (see countUnreachable). */
  readonly gap: number;
  /** The claim's request it answers (`auditWanted`'s value), deleted when the pass ends. */
  readonly wanted?: string;
}

/** Most clients in reach one check counts (a shard with more is audited by a pass at most once an hour). */
const CLIENTS_PER_CHECK = 1_000;
/** Shortest time between two passes over a shard whose clients are too many to count. */
const UNCOUNTED_PASS_MS = 3_600_000;

/**
 * The ring audit: finds clients whose pending tasks no claim can reach (on no ring, not parked at a
 * cap, not throttled), and puts them back (`rejoinClient`, recorded in faults). No script leaves a
 * client so (a generated test holds every script to that), but a hand edit or a lost ring key can, and
 * then nothing else would notice: a new emit for the client does not bring it back (its list is not
 * empty), and stats walk the ring. It is a backstop, not a hot path. Each sweep first asks Redis whether
 * the shard's pending count agrees with the tasks of the clients in reach (`countUnreachable`, one call,
 * no SCAN): an idle or healthy shard costs that alone. Only when they disagree, or a claim that found the
 * count above what it reached asked for one (`auditWanted`: it set the count right, which hides a stranded
 * client from the comparison), does it start a pass over
 * the shard's client keys, one SCAN step (MATCH on the shard's base) per sweep, until the pass has seen
 * every key: a pass over a database of N keys takes N / 1,000 sweeps. A disagreement that a whole pass
 * could not explain (a count edited by hand) starts no other pass until it changes.
 */
export class RingAudit {
  /** Where each shard's pass under way goes on: node index (Cluster primaries) and cursor. */
  // table-ok: one entry per queue shard with a pass under way
  private readonly cursors = new Map<string, Pass>();
  /** Per shard: the gap a whole pass did not explain (no pass for it again), and when its last pass ended. */
  // table-ok: one entry per queue shard audited
  private readonly passed = new Map<string, { gap: number; at: number }>();

  constructor(
    private readonly redis: TaskRedis,
    private readonly gateway: ScriptGateway,
    private readonly keysPerStep = KEYS_PER_STEP,
  ) {}

  /** One audit step of a shard: its check, and a SCAN step while a pass is under way; the clients put back. */
  async step(keys: QueueKeys): Promise<{ clientId: string; tasks: number }[]> {
    const at = this.cursors.get(keys.base) ?? (await this.passNeeded(keys));
    if (at === undefined) return [];
    const nodes = this.redis instanceof Cluster ? this.redis.nodes('master') : [this.redis];
    const node = nodes[at.node % nodes.length];
    const [next, found] = await node.scan(
      at.cursor,
      'MATCH',
      `${escapeGlob(keys.base)}:p*:*`,
      'COUNT',
      this.keysPerStep,
    );
    const passEnds = next === '0' && at.node + 1 >= nodes.length;
    if (passEnds) this.cursors.delete(keys.base);
    // spread-ok: one step of a pass under way
    else
      this.cursors.set(keys.base, next === '0' ? { ...at, node: at.node + 1, cursor: '0' } : { ...at, cursor: next });
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
    at.rejoined += rejoined.length;
    // A pass that put nothing back leaves its gap unexplained (a count edited by hand): not passed over again.
    if (passEnds) {
      this.passed.set(keys.base, { gap: at.rejoined > 0 ? 0 : at.gap, at: Date.now() });
      if (at.wanted !== undefined) await this.gateway.sweeps.auditDone(keys, at.wanted);
    }
    return rejoined;
  }

  /** Whether the shard needs a pass over its client keys (its start), from one count check. */
  private async passNeeded(keys: QueueKeys): Promise<Pass | undefined> {
    const { gap, wanted } = await this.gateway.sweeps.countUnreachable(keys, CLIENTS_PER_CHECK);
    const pass = { node: 0, cursor: '0', rejoined: 0, gap, wanted };
    if (wanted !== undefined) return pass;
    const last = this.passed.get(keys.base);
    if (gap === 0 || (gap > 0 && last?.gap === gap)) return undefined;
    if (gap < 0 && last !== undefined && Date.now() - last.at < UNCOUNTED_PASS_MS) return undefined;
    return pass;
  }
}

/** A literal for a SCAN MATCH pattern (Redis globs treat * ? [ ] \ as special). */
function escapeGlob(text: string): string {
  return text.replace(/[*?[\]\\]/g, (char) => `\\${char}`);
}
