import type { PrefixKeys } from '../redis/keys.js';
import { isRedisFull } from '../redis/refusals.js';
import type { SweepGateway } from '../redis/sweep-gateway.js';

/**
 * Most queue shards one turn sweeps: a deployment of more sweeps each every few turns (50 patterns: every
 * 5), so an idle deployment's sweep costs Redis about the same whatever its number of patterns.
 */
const SHARDS_PER_TURN = 10;
/** A sweep turn's share of the interval: a little less, so the next tick of a timer that fired late still finds it over. */
const TURN_SHARE = 0.9;
/**
 * Most ticks a process lets pass before it asks for a turn again, after finding another process's turn under
 * way (1, then doubling): the process that sweeps keeps asking at every tick, the others rarely, so a
 * deployment's turn requests stay about one per interval plus P / 8, and a process that died while sweeping
 * is taken over within nine ticks.
 */
const MOST_TICKS_PASSED = 8;

/** The `index`-th run of `size` shards, in name order (wrapping around): what one sweep turn covers. */
export interface Slice {
  readonly index: number;
  readonly size: number;
}

/**
 * One process's side of the deployment's sweep turns (takeSweepTurn): whether this tick is its turn, and
 * which slice of shards the turn sweeps. A turn lasts a little less than the interval, and a process takes
 * over a turn taken longer ago than its own, so the deployment sweeps about once per the shortest interval
 * among its processes, whatever their number; a process that dies during its turn leaves the next one to
 * another. A process that found another's turn under way asks again only after a few ticks
 * (MOST_TICKS_PASSED), so the requests too stay about the same whatever the number of processes. A full
 * Redis refuses the turn's write: then this process sweeps anyway (every move is fenced and idempotent; the
 * turn only spares repeated work), the slice after its last one.
 */
export class SweepTurns {
  /** The number of this process's last turn. */
  private lastTurn = 0;
  /** Ticks to let pass before asking for a turn again, and how many that was last time. */
  private ticksToPass = 0;
  private ticksPassed = 0;

  constructor(
    private readonly sweeps: SweepGateway,
    private readonly keys: PrefixKeys,
    private readonly owner: string,
  ) {}

  /** The slice this process sweeps at this tick, or undefined when it is not its turn. */
  async take(intervalMs: number): Promise<Slice | undefined> {
    if (this.ticksToPass > 0) {
      this.ticksToPass--;
      return undefined;
    }
    const turnMs = Math.max(1, Math.floor(intervalMs * TURN_SHARE));
    let turn = this.lastTurn + 1;
    try {
      turn = await this.sweeps.takeTurn(this.keys, this.owner, turnMs);
      if (turn === 0) {
        this.ticksPassed = Math.min(MOST_TICKS_PASSED, Math.max(1, this.ticksPassed * 2));
        this.ticksToPass = this.ticksPassed;
        return undefined;
      }
    } catch (error) {
      if (!isRedisFull(error)) throw error;
    }
    this.ticksPassed = 0;
    this.lastTurn = turn;
    // Each turn sweeps the slice its number points at: the processes taking turns cover every shard in turn.
    return { index: turn - 1, size: SHARDS_PER_TURN };
  }
}
