import { FLOW_RECHECK_MS, POLICY_LETTERS, flowTaskId, type FlowReceipt } from '../model/flow.js';
import type { TaskStore } from '../redis/store.js';
import type { TaskLogger } from '../support/logger.js';
import type { StoredNodeSpec } from './flow-actions.js';
import { FlowFolder } from './flow-folder.js';
import { releaseTemplates } from './flow-templates.js';
import type { ResolvedFlow, ResolvedFlowNode } from './flow-options.js';

/**
 * Creates a flow (checked already: `resolveFlow`) and releases its nodes without parents. On one Redis server, in
 * one script (all of it or nothing): its record, its roots' tasks and its count, each node with parents keeping
 * its release template (flow-templates.ts). On a Cluster: in the due index first (a crash before its first
 * releases leaves it there, and a reaper makes them), then its record, then its first releases (a fold with no
 * events answers them). A call again
 * with the same id (after a lost reply) creates nothing and answers `created: false`.
 */
export async function createFlow(store: TaskStore, flow: ResolvedFlow, logger?: TaskLogger): Promise<FlowReceipt> {
  const { redis, keys, gateway } = store;
  // On a Cluster the flow's record and its roots' queues have slots of their own: in the due index first.
  const oneServer = !redis.isCluster;
  if (!oneServer) await redis.zadd(keys.flowsDue, 'NX', Date.now() + FLOW_RECHECK_MS, flow.id);
  const specs = flow.nodes.map((node) => specJson(node, flow.keepMs));
  const templates = await releaseTemplates(
    store,
    flow.id,
    flow.nodes.map((node, i) => ({ id: node.id, spec: JSON.parse(specs[i]) as StoredNodeSpec })),
  );
  const nodes = flow.nodes.map(
    (node, i) =>
      [
        node.id,
        `${POLICY_LETTERS[node.onParentFailure]}|${node.deps.join(',')}`,
        specs[i],
        templates.get(node.id) ?? '',
      ] as const,
  );
  const complete = flow.onComplete ? JSON.stringify(flow.onComplete) : '';
  const dueAt = oneServer ? Date.now() + FLOW_RECHECK_MS : undefined;
  const opened = await gateway.flow.open(keys.flow(flow.id), flow.keepMs, complete, dueAt, nodes);
  if (opened.left) await new FlowFolder(store, logger).settle(flow.id);
  const taskIds: Record<string, string> = {};
  for (const node of flow.nodes) taskIds[node.id] = flowTaskId(flow.id, node.id);
  return { flowId: flow.id, created: opened.made, taskIds };
}

/** A node's spec as stored (see StoredNodeSpec), its payload's JSON written in as it is. */
function specJson(node: ResolvedFlowNode, keepMs: number): string {
  const head = JSON.stringify({
    pattern: node.pattern,
    clientId: node.clientId,
    keepMs,
    maxAttempts: node.maxAttempts,
    backoff: node.backoff,
    priority: node.priority,
  });
  return `${head.slice(0, -1)},"payload":${node.payloadJson}}`;
}
