import { InvalidFlowError } from '../model/errors.js';
import {
  NODE_STATES,
  flowTaskId,
  type FlowCancelResult,
  type FlowError,
  type FlowNodeStatus,
  type FlowParentPolicy,
  type FlowState,
  type FlowStatus,
} from '../model/flow.js';
import { describe } from '../support/describe.js';
import { flowIdProblem } from '../flows/flow-options.js';
import { FlowFolder } from '../flows/flow-folder.js';
import { parentResults, type StoredNodeSpec } from '../flows/flow-actions.js';
import { MAX_CANCEL_REASON } from './tasks.js';
import { AdminPart } from './part.js';

const POLICIES: Readonly<Record<string, FlowParentPolicy>> = { f: 'fail-flow', s: 'skip', r: 'run' };
const FLOW_STATES: readonly string[] = ['running', 'succeeded', 'failed', 'cancelled'];

/**
 * Flows by id: where one is (`get`: every node's state, result or error; settles not folded yet, within
 * milliseconds of the settle or a reaper's sweep, not shown), and cancelling one (`cancel`).
 */
export class FlowReader extends AdminPart {
  async get(id: string): Promise<FlowStatus> {
    checkFlowId('getFlow()', id);
    const keys = this.keys.flow(id);
    const [record, nodes, edges, specs, results] = (await Promise.all([
      this.redis.hgetall(keys.record),
      this.redis.hgetall(keys.nodes),
      this.redis.hgetall(keys.edges),
      this.redis.hgetall(keys.specs),
      this.redis.hgetall(keys.results),
    ])) as Record<string, string>[];
    if (record.state === undefined) return { id, state: 'unknown', ended: false, nodes: [] };
    const statuses: FlowNodeStatus[] = Object.keys(nodes).map((node) => {
      const letter = nodes[node].charAt(0);
      const [policy, list] = [(edges[node] ?? 'f|').charAt(0), (edges[node] ?? 'f|').slice(2)];
      const spec = parseSpec(specs[node]);
      const base = {
        id: node,
        pattern: spec?.pattern ?? '',
        taskId: flowTaskId(id, node),
        deps: list === '' ? [] : list.split(','),
        onParentFailure: POLICIES[policy] ?? 'fail-flow',
        state: NODE_STATES[letter] ?? 'waiting',
      };
      const raw = results[node];
      if (raw === undefined) return base;
      const [outcome] = Object.values(parentResults([{ id: node, state: letter, raw }]));
      // spread-ok: an admin read
      if (outcome.state === 'succeeded' && outcome.error === undefined) return { ...base, result: outcome.result };
      // spread-ok: an admin read
      return outcome.error ? { ...base, error: outcome.error as FlowError } : base;
    });
    return {
      id,
      state: (FLOW_STATES.includes(record.state) ? record.state : 'unknown') as FlowState,
      ...(record.reason ? { reason: record.reason } : {}),
      ended: record.ended !== undefined,
      ...(record.created ? { createdAt: Number(record.created) } : {}),
      ...(record.ended ? { endedAt: Number(record.ended) } : {}),
      nodes: statuses,
      ...(record.callback ? { callbackId: record.callback } : {}),
    };
  }

  /**
   * Cancels a running flow: nothing of it is released any more; its waiting nodes are cancelled, its released
   * ones stopped through their fences (a waiting task removed from its queue, a running one's handler signal
   * aborted at its worker's next heartbeat, its late settle refused). Its completion callback comes once the
   * stopped nodes' cancels are folded. A flow that ended already is left as it is.
   */
  async cancel(id: string, reason = ''): Promise<FlowCancelResult> {
    checkFlowId('cancelFlow()', id);
    if (typeof reason !== 'string' || reason.length > MAX_CANCEL_REASON) {
      throw new InvalidFlowError(
        `cancelFlow() reason must be a string of at most ${MAX_CANCEL_REASON} characters, got ${describe(reason)}`,
      );
    }
    const keys = this.keys.flow(id);
    // In the due index first: a crash between the cancel and its stops leaves them to a reaper.
    await this.redis.zadd(this.keys.flowsDue, Date.now(), id);
    const was = await this.store.gateway.flow.cancel(keys, reason);
    if (was !== 'running')
      return { cancelled: false, state: (FLOW_STATES.includes(was) ? was : 'unknown') as FlowState };
    const released = Object.values(await this.redis.hgetall(keys.nodes)).filter(
      (value) => value.startsWith('q/') || value.startsWith('r/'),
    ).length;
    await new FlowFolder(this.store).settle(id);
    return { cancelled: true, stopped: released };
  }

  /** Flows created and ended under the prefix (for metrics). */
  async counts(): Promise<{ created: number; succeeded: number; failed: number; cancelled: number }> {
    const fields = (await this.redis.hgetall(this.keys.flowCounters)) as Record<string, string>;
    const count = (name: string) => Number(fields[name] ?? 0) || 0;
    return {
      created: count('created'),
      succeeded: count('succeeded'),
      failed: count('failed'),
      cancelled: count('cancelled'),
    };
  }
}

function checkFlowId(where: string, id: unknown): void {
  const problem = flowIdProblem(id);
  if (problem)
    throw new InvalidFlowError(
      `${where} needs a flow id that ${problem.replace(/^must/, 'must')}, got ${describe(id)}`,
    );
}

function parseSpec(raw: string | undefined): StoredNodeSpec | undefined {
  if (raw === undefined) return undefined;
  try {
    return JSON.parse(raw) as StoredNodeSpec;
  } catch {
    return undefined;
  }
}
