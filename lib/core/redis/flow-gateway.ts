import type { FlowKeys } from './keys.js';
import type { FlowKeyNames, TaskRedis } from './scripts.js';

/** A parent of a node to release, as the fold answered it: its id, state letter and stored result. */
export interface FoldedParent {
  readonly id: string;
  readonly state: string;
  readonly raw: string;
}

/** A node the fold answered as to release (enqueue) or to stop: its id and spec (JSON, as created). */
export interface FoldedNode {
  readonly node: string;
  readonly spec: string;
}

/** What foldFlow answered: no record, or the flow's state with the releases and stops still to make. */
export type FlowFold =
  | { readonly kind: 'unknown' }
  | {
      readonly kind: 'flow';
      /** When the fold was sent (Date.now() ms): what it answered is enqueued within a deadline from then. */
      readonly asked: number;
      readonly state: string;
      readonly created: string;
      /** '' running on; 'now' ended by this fold; 'before' ended earlier. */
      readonly ended: '' | 'now' | 'before';
      readonly reason: string;
      /** The completion callback's task id, once on record. */
      readonly callback?: string;
      /** The completion callback (JSON), when the flow has one. */
      readonly complete?: string;
      /** What of it was counted (countFlow): c its creation, e its end. */
      readonly counted: string;
      /** How long its keys are kept once it ended (ms). */
      readonly keep: number;
      readonly releases: readonly (FoldedNode & { readonly parents: readonly FoldedParent[] })[];
      /** With its state letter: q (its enqueue may not have happened yet), r (enqueued). */
      readonly stops: readonly (FoldedNode & { readonly state: string })[];
    };

/** The scripts of flows (see scripts/include/flowRecord.lua and include/flow.lua), one method each. */
export class FlowGateway {
  constructor(private readonly redis: TaskRedis) {}

  /**
   * openFlow: `created` (Redis ms, the flow's generation) when made now, else `existed` with its state; `left`:
   * something is left for the creator's fold (its roots, its count). Each node is `[id, edges, spec, template]`
   * (edges: `<policy letter>|<dep>,<dep>`; template: its release template, '' none; see flows/flow-templates.ts).
   * `dueAt` (on one Redis server; undefined on a Cluster): the roots are written and the creation counted in the
   * call, and a root left puts the flow in the due index at that time.
   */
  async open(
    keys: FlowKeys,
    keepMs: number,
    complete: string,
    dueAt: number | undefined,
    nodes: readonly (readonly [string, string, string, string])[],
  ): Promise<{ made: boolean; created: string; state: string; left: boolean }> {
    const reply = await this.redis.openFlow(...names(keys), keepMs, complete, dueAt ?? '', ...nodes.flat());
    return reply[0] === 1
      ? { made: true, created: String(reply[1]), state: 'running', left: reply[2] === 1 }
      : { made: false, created: String(reply[2]), state: String(reply[1]), left: true };
  }

  /** foldFlow: the events (seq, node id, outcome, value per event) applied; what is left to do. */
  async fold(keys: FlowKeys, events: readonly string[]): Promise<FlowFold> {
    const asked = Date.now();
    return foldAnswer(await this.redis.foldFlow(...names(keys), ...events), asked);
  }

  /** markFlow released / gone: how many nodes changed. */
  async mark(keys: FlowKeys, what: 'released' | 'gone', nodes: readonly string[]): Promise<number> {
    if (nodes.length === 0) return 0;
    return Number(await this.redis.markFlow(...names(keys), what, ...nodes));
  }

  /** markFlow callback: true when recorded by this call. */
  async recordCallback(keys: FlowKeys, taskId: string): Promise<boolean> {
    return Number(await this.redis.markFlow(...names(keys), 'callback', taskId)) === 1;
  }

  /** markFlow counted: `letters` (c, e) on record as counted. */
  async recordCounted(keys: FlowKeys, letters: string): Promise<void> {
    await this.redis.markFlow(...names(keys), 'counted', letters);
  }

  /** countFlow: `counter` counted once under `marker` (kept `markerMs`); true when counted by this call. */
  async count(counters: string, marker: string, counter: string, markerMs: number): Promise<boolean> {
    return (await this.redis.countFlow(counters, marker, counter, markerMs)) === 1;
  }

  /** cancelFlow: 'running' when cancelled now, else its state ('unknown': no record). */
  cancel(keys: FlowKeys, reason: string): Promise<string> {
    return this.redis.cancelFlow(...names(keys), reason);
  }
}

function names(keys: FlowKeys): FlowKeyNames {
  return [keys.record, keys.nodes, keys.edges, keys.specs, keys.results];
}

function foldAnswer(reply: (number | string)[], asked: number): FlowFold {
  if (reply[0] === -1) return { kind: 'unknown' };
  const [state, created, ended, reason, callback, complete, counted, keep] = reply.map(String);
  let at = 8;
  const next = (): string => String(reply[at++]);
  const releases: (FoldedNode & { parents: FoldedParent[] })[] = [];
  for (let n = Number(next()); n > 0; n--) {
    const node = next();
    const spec = next();
    const parents: FoldedParent[] = [];
    for (let p = Number(next()); p > 0; p--) parents.push({ id: next(), state: next(), raw: next() });
    releases.push({ node, spec, parents });
  }
  const stops: (FoldedNode & { state: string })[] = [];
  for (let n = Number(next()); n > 0; n--) stops.push({ node: next(), state: next(), spec: next() });
  return {
    kind: 'flow',
    asked,
    state,
    created,
    ended: ended === '1' ? 'now' : ended === '2' ? 'before' : '',
    reason,
    callback: callback === '' ? undefined : callback,
    complete: complete === '' ? undefined : complete,
    counted,
    keep: Number(keep),
    releases,
    stops,
  };
}
