import type { FlowNode, FlowParentPolicy, FlowSummary, RedisTaskClient } from '../../lib/index.js';
import type { TaskAdmin } from '../../lib/core/admin/admin.js';

/** The patterns a load's nodes go to (the chaos worker's handlers), and its callback's. */
export const FLOW_PATTERNS = ['chaos.flow.a', 'chaos.flow.b', 'chaos.flow.c'] as const;

/** One flow of a load as created, with what must come of it. */
export interface PlannedFlow {
  readonly id: string;
  readonly nodes: readonly FlowNode[];
  /** The node failing every attempt, if any, and the policy of its children. */
  readonly failing?: { readonly node: string; readonly policy: FlowParentPolicy };
}

/** Diamonds, chains of 5 and fan-outs of 50 with their fan-in, in turn; a few with a node that always fails. */
export function planFlows(count: number, next: () => number, shapes?: (f: number) => number): PlannedFlow[] {
  const policies: FlowParentPolicy[] = ['fail-flow', 'skip', 'run'];
  return Array.from({ length: count }, (_, f) => {
    const id = `f${f}`;
    const shape = shapes ? shapes(f) : f % 10;
    const edges: [string, string[]][] =
      shape < 4
        ? [
            ['A', []],
            ['B', ['A']],
            ['C', ['A']],
            ['D', ['B', 'C']],
          ]
        : shape < 8
          ? ['n1', 'n2', 'n3', 'n4', 'n5'].map((node, i, all) => [node, i === 0 ? [] : [all[i - 1]]])
          : [
              ['R', []],
              ...Array.from({ length: 50 }, (_, i): [string, string[]] => [`L${i}`, ['R']]),
              ['S', Array.from({ length: 50 }, (_, i) => `L${i}`)],
            ];
    // One flow in eight has a node (never the last one) failing every attempt, its children on one policy.
    const failing =
      next() < 0.125
        ? { node: edges[Math.floor(next() * (edges.length - 1))][0], policy: policies[Math.floor(next() * 3)] }
        : undefined;
    const nodes: FlowNode[] = edges.map(([node, deps], i) => ({
      id: node,
      pattern: FLOW_PATTERNS[(f + i) % 3],
      payload: { workMs: 2, ...(failing?.node === node ? { fail: true } : {}) },
      deps,
      clientId: `client-${(f + i) % 4}`,
      ...(failing && deps.includes(failing.node) ? { onParentFailure: failing.policy } : {}),
    }));
    return { id, nodes, ...(failing ? { failing } : {}) };
  });
}

/** Creates the planned flows (their callbacks on `chaos.flow.done`). */
export async function createFlows(client: RedisTaskClient, flows: readonly PlannedFlow[]): Promise<void> {
  for (const flow of flows) {
    await client.flow({ id: flow.id, nodes: flow.nodes, onComplete: { pattern: 'chaos.flow.done' } });
  }
}

/**
 * What must come of a flow whatever the timing: its final state and, for each node, whether it must run once
 * (`run`), must never run (`never`), or may run at most once (`maybe`: a sibling of a failure under
 * fail-flow, which the flow's stop may reach before it runs or not).
 */
export function expectedOf(flow: PlannedFlow): {
  state: FlowSummary['state'];
  nodes: Map<string, 'run' | 'never' | 'maybe'>;
} {
  const nodes = new Map<string, 'run' | 'never' | 'maybe'>();
  const outcome = new Map<string, 'ok' | 'bad'>();
  let failedFlow = false;
  for (const node of flow.nodes) {
    const badParent = (node.deps ?? []).some((dep) => outcome.get(dep) === 'bad');
    if (badParent && (node.onParentFailure ?? 'fail-flow') === 'fail-flow') failedFlow = true;
    if (badParent && node.onParentFailure !== 'run') {
      nodes.set(node.id, 'never');
      outcome.set(node.id, 'bad');
      continue;
    }
    nodes.set(node.id, 'run');
    outcome.set(node.id, flow.failing?.node === node.id ? 'bad' : 'ok');
  }
  if (failedFlow) {
    // Everything not downstream of the failure may have run before the stop came, or not.
    const downstream = new Set<string>([flow.failing?.node ?? '']);
    for (const node of flow.nodes) {
      if ((node.deps ?? []).some((dep) => downstream.has(dep))) downstream.add(node.id);
    }
    for (const node of flow.nodes) {
      if (node.id === flow.failing?.node) nodes.set(node.id, 'run');
      else nodes.set(node.id, downstream.has(node.id) ? 'never' : 'maybe');
    }
  }
  return { state: flow.failing ? 'failed' : 'succeeded', nodes };
}

/**
 * What is wrong with a load's outcome, from the chaos worker's records: first attempts and runs per node
 * (`<flow>/<node>`), what each node saw of its parents, first attempts of each flow's callback and its summary.
 */
export function wrongFlows(
  flows: readonly PlannedFlow[],
  records: {
    firsts: Record<string, string>;
    runs: Record<string, string>;
    saw: Record<string, string>;
    callbackFirsts: Record<string, string>;
    callbackRuns: Record<string, string>;
    summaries: Record<string, string>;
  },
): string[] {
  const wrong: string[] = [];
  for (const flow of flows) {
    const expected = expectedOf(flow);
    const summary = JSON.parse(records.summaries[flow.id] ?? '{}') as Partial<FlowSummary>;
    // One callback task: it ran (any attempt), never two first attempts.
    if (Number(records.callbackFirsts[flow.id] ?? 0) > 1 || Number(records.callbackRuns[flow.id] ?? 0) === 0) {
      wrong.push(
        `${flow.id}: ${records.callbackFirsts[flow.id] ?? 0} callback tasks, ${records.callbackRuns[flow.id] ?? 0} runs`,
      );
    }
    if (summary.state !== expected.state) wrong.push(`${flow.id}: ended ${summary.state}, expected ${expected.state}`);
    for (const node of flow.nodes) {
      const key = `${flow.id}/${node.id}`;
      const firsts = Number(records.firsts[key] ?? 0);
      // Runs of any attempt: a first run cut off by a kill -9 before it was counted comes back as attempt 2.
      const runs = Number(records.runs[key] ?? 0);
      const must = expected.nodes.get(node.id);
      if (firsts > 1) wrong.push(`${key}: released ${firsts} times`);
      if (must === 'run' && runs === 0) wrong.push(`${key}: never ran, expected to`);
      if (must === 'never' && runs !== 0) wrong.push(`${key}: ran, expected never`);
      if (runs > 0) {
        // Every parent handed on its own name, or (a child of the failing node on policy run) its failure.
        const saw = JSON.parse(records.saw[key] ?? '{}') as Record<string, { state: string; result?: unknown }>;
        const deps = node.deps ?? [];
        const right = deps.every((dep) =>
          dep === flow.failing?.node
            ? saw[dep]?.state === 'failed'
            : saw[dep]?.state === 'succeeded' && saw[dep]?.result === `${flow.id}/${dep}`,
        );
        if (!right || Object.keys(saw).length !== deps.length) wrong.push(`${key}: saw ${records.saw[key]}`);
      }
    }
  }
  return wrong;
}

/** Runs recorded under ids of their own (`<name>|<run id>` -> attempt): runs and first attempts per name. */
export function tally(log: Record<string, string>): { runs: Record<string, string>; firsts: Record<string, string> } {
  const runs: Record<string, string> = {};
  const firsts: Record<string, string> = {};
  for (const [field, attempt] of Object.entries(log)) {
    const name = field.slice(0, field.lastIndexOf('|'));
    runs[name] = String(Number(runs[name] ?? 0) + 1);
    if (attempt === '1') firsts[name] = String(Number(firsts[name] ?? 0) + 1);
  }
  return { runs, firsts };
}

/** What a few of the flows not ended hold, for a chaos run that timed out: flow, node and task states. */
export async function describeStuck(
  admin: TaskAdmin,
  flows: readonly PlannedFlow[],
  ended: ReadonlySet<string>,
): Promise<string> {
  const lines: string[] = [];
  for (const flow of flows.filter((planned) => !ended.has(planned.id)).slice(0, 3)) {
    const status = await admin.getFlow(flow.id);
    const states: Record<string, number> = {};
    for (const node of status.nodes) states[node.state] = (states[node.state] ?? 0) + 1;
    const open = status.nodes.filter((node) => node.state !== 'waiting' && node.state !== 'succeeded').slice(0, 3);
    const tasks = await Promise.all(
      open.map(
        async (node) => `${node.id}=${node.state}/task ${(await admin.getTask(node.pattern, node.taskId)).state}`,
      ),
    );
    const callback =
      status.callbackId === undefined ? 'none' : (await admin.getTask('chaos.flow.done', status.callbackId)).state;
    lines.push(
      `${flow.id}: ${status.state}, ended ${status.ended}, nodes ${JSON.stringify(states)}, ${tasks.join(' ')}; callback ${callback}`,
    );
  }
  return lines.join('\n');
}
