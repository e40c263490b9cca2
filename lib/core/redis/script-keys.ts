import type { QueueKeys } from './keys.js';
import type { SettleKeys } from './scripts.js';

/**
 * The KEYS of one variable-key script call: the script's fixed keys, then every other key its ARGV
 * refers to by 1-based index (as Lua sees KEYS), each listed once.
 */
export class ScriptKeys {
  readonly keys: string[];
  // table-ok: lives for one script call
  private readonly index = new Map<string, number>();

  constructor(fixed: readonly string[]) {
    this.keys = [...fixed];
  }

  /** The 1-based KEYS index of `key`, adding it on first use. */
  indexOf(key: string): number {
    let at = this.index.get(key);
    if (at === undefined) {
      this.keys.push(key);
      at = this.keys.length;
      this.index.set(key, at);
    }
    return at;
  }

  /** KEYS indexes of a client's pending list and priority set (the `pushTask` helper's targets). */
  client(queue: QueueKeys, clientId: string): [list: number, priority: number] {
    return [this.indexOf(queue.pending(clientId)), this.indexOf(queue.priority(clientId))];
  }

  /** `numkeys` followed by the keys, as a variable-key script call starts. */
  get args(): (string | number)[] {
    return [this.keys.length, ...this.keys];
  }
}

/** The keys every settle script ends with (see SettleKeys): the cap slot's, the counters, the base and the root. */
export function settleKeys(keys: QueueKeys): SettleKeys {
  return [keys.counted, keys.inflight, keys.parked, keys.ring, keys.counters, keys.base, keys.root];
}
