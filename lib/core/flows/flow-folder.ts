import { DEFAULT_GROUP, type QueueKeys } from '../redis/keys.js';
import type { TaskStore } from '../redis/store.js';
import { FLOW_RECHECK_MS } from '../model/flow.js';
import { eachOf } from '../support/each-of.js';
import { errorMessage, type TaskLogger } from '../support/logger.js';
import { FlowActions } from './flow-actions.js';

/** Events folded per read of a shard's list. */
const FOLD_SLICE = 1_000;

/** A flow event's fields (`<seq>\n<flow>\n<node>\n<outcome>\n<value>`; the value may hold newlines), or undefined. */
function eventFields(event: string): [string, string, string, string, string] | undefined {
  const cuts: number[] = [];
  for (let at = 0; cuts.length < 4; at++) {
    at = event.indexOf('\n', at);
    if (at < 0) return undefined;
    cuts.push(at);
  }
  return [
    event.slice(0, cuts[0]),
    event.slice(cuts[0] + 1, cuts[1]),
    event.slice(cuts[1] + 1, cuts[2]),
    event.slice(cuts[2] + 1, cuts[3]),
    event.slice(cuts[3] + 1),
  ];
}

/**
 * The second step of a flow node's settle, run by the worker that settled it (at once) and by reapers (each
 * sweep): a shard's flow events (written by the settle scripts, in the node's own slot) are folded into each
 * flow's record (its own slot), what the fold answers is done (children released, nodes stopped, the
 * completion callback enqueued: FlowActions), then the events are dropped. No lock: a fold applies each
 * node's events once and in order whoever folds them, every release is guarded (a fixed task id and a
 * deduplication key of the flow's generation), and the events are dropped only after what they caused is
 * done and only while they are still their list's head; so two processes at once, or one again after a
 * crash (kill -9, a Redis restart from AOF), release each node once and lose nothing.
 */
export class FlowFolder {
  private readonly actions: FlowActions;
  /** Shards being folded at a worker's nudge (true: nudged again meanwhile, fold once more). */
  // table-ok: one entry per queue shard, while a fold of it runs
  private readonly folding = new Map<QueueKeys, boolean>();

  constructor(
    private readonly store: TaskStore,
    private readonly logger?: TaskLogger,
  ) {
    this.actions = new FlowActions(store, logger, (queue) => this.fold(queue));
  }

  /**
   * A node of a flow settled in this shard (told by its worker): its events are folded now, so its children
   * are released in milliseconds, not at the next sweep. Nudges that come while a fold runs make one more;
   * a fold that fails is left to the sweeps (its events stay).
   */
  nudge(queue: QueueKeys): void {
    if (this.folding.has(queue)) {
      this.folding.set(queue, true);
      return;
    }
    this.folding.set(queue, false);
    const run = (): void => {
      this.fold(queue).then(
        () => {
          if (this.folding.get(queue)) {
            this.folding.set(queue, false);
            run();
          } else this.folding.delete(queue);
        },
        (error: unknown) => {
          this.folding.delete(queue);
          this.logger?.warn(
            `could not fold the flow events of "${queue.queue}" (a sweep will): ${errorMessage(error)}`,
          );
        },
      );
    };
    run();
  }

  /** Folds a shard's flow events (the default group's: only its runs count); how many were folded. */
  async fold(queue: QueueKeys): Promise<number> {
    if (queue.group !== DEFAULT_GROUP) return 0;
    const { redis, gateway } = this.store;
    let folded = 0;
    for (;;) {
      const events = await redis.lrange(queue.flowEvents, 0, FOLD_SLICE - 1);
      if (events.length === 0) return folded;
      // table-ok: lives for one slice
      const byFlow = new Map<string, string[]>();
      for (const event of events) {
        const fields = eventFields(event);
        if (!fields) continue; // not an event of ours: dropped with the rest
        const [seq, flow, node, outcome, value] = fields;
        const list = byFlow.get(flow);
        if (list) list.push(seq, node, outcome, value);
        else byFlow.set(flow, [seq, node, outcome, value]);
      }
      // A flow whose settle fails leaves the others settled; the events stay (folded again later) and it is thrown.
      await eachOf(byFlow, ([flow, fields]) => this.actions.settle(flow, fields));
      await gateway.batch.trim(queue.flowEvents, events);
      folded += events.length;
      if (events.length < FOLD_SLICE) return folded;
    }
  }

  /**
   * Flows in the due index whose next check came (Redis ms `now`): each is folded again, which answers (and
   * so makes) a release, a stop or a callback a crash cut off. One still running is checked again later; one
   * that ended with its callback on record, or whose record is gone, leaves the index.
   */
  async checkDue(now: number): Promise<void> {
    const { redis, keys } = this.store;
    await eachOf(await redis.zrangebyscore(keys.flowsDue, '-inf', now, 'LIMIT', 0, 100), async (id) => {
      if (await this.actions.pending(id)) await redis.zadd(keys.flowsDue, 'XX', now + FLOW_RECHECK_MS, id);
      else await redis.zrem(keys.flowsDue, id);
    });
  }

  /** Folds flow `id` with no events, doing what is left (a creation's first releases, a cancel's stops). */
  async settle(id: string): Promise<void> {
    await this.actions.settle(id, []);
  }
}
