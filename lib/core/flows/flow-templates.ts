import type { TaskStore } from '../redis/store.js';
import { prepareTask } from '../producer/task-items.js';
import { nodeItem, type StoredNodeSpec } from './flow-actions.js';

/** What a template's entry is made with, then cut out: its enqueue time and its parents' outcomes. */
const ENQUEUED_AT = ',"enqueuedAt":0';
const NO_PARENTS = ',"parents":{}';

/**
 * The release templates of a flow's nodes, by node id, when the flow is made on one Redis server
 * (not a Cluster; else none): what lets a parent's success release a child in the parent's own settle, in the
 * same script (scripts/include/flow.lua, `flowRelease`), instead of a fold after it, and its creation write its
 * roots (openFlow-5.lua). A node with parents keeps it beside its spec (`specs` hash, field `,<node id>`: node ids hold no commas), one string of 9 lines: the shard root its
 * task goes to, its task id, its client id, priority, index keep and live (ms), then its entry cut in three around its
 * enqueue time and its parents' outcomes (the settle writes in the Redis clock and the parents' results). A
 * node without a template, or a settle that cannot take it, goes by the fold as before.
 */
export async function releaseTemplates(
  store: TaskStore,
  flow: string,
  nodes: readonly { readonly id: string; readonly spec: StoredNodeSpec }[],
): Promise<Map<string, string>> {
  // table-ok: one entry per node, for one creation
  const templates = new Map<string, string>();
  if (store.redis.isCluster) return templates;
  for (const node of nodes) {
    const task = prepareTask(nodeItem(flow, node.id, node.spec, {}, true), 0, undefined, {
      maxPayloadBytes: Number.MAX_SAFE_INTEGER,
      deduplicationTtlMs: 1,
    });
    const at = task.entry.indexOf(ENQUEUED_AT);
    const parents = task.entry.indexOf(NO_PARENTS, at);
    if (at < 0 || parents < 0 || !task.track) continue;
    const shard = (await store.layouts.layout(node.spec.pattern)).shardOf(node.spec.clientId);
    templates.set(
      node.id,
      [
        shard.root,
        task.id,
        node.spec.clientId,
        String(task.priority),
        String(task.track.keepMs),
        String(task.track.liveMs),
        task.entry.slice(0, at + ENQUEUED_AT.length - 1),
        task.entry.slice(at + ENQUEUED_AT.length, parents + NO_PARENTS.length - 2),
        task.entry.slice(parents + NO_PARENTS.length),
      ].join('\n'),
    );
  }
  return templates;
}
