import { InvalidFlowError } from '../model/errors.js';
import {
  FLOW_DEFAULT_KEEP_MS,
  MAX_FLOW_ID_LENGTH,
  MAX_FLOW_NODES,
  POLICY_LETTERS,
  type FlowCallback,
  type FlowNode,
  type FlowOptions,
  type FlowParentPolicy,
} from '../model/flow.js';
import type { BackoffOptions } from '../model/retry-policy.js';
import { nameProblem, patternProblem, taskRules, validateBackoff, validateMaxAttempts } from '../config/rules.js';
import { describe } from '../support/describe.js';
import { newTaskId } from '../producer/producer.js';

/** A node checked, with its defaults filled in and its payload as JSON (as it is stored). */
export interface ResolvedFlowNode {
  readonly id: string;
  readonly pattern: string;
  readonly payloadJson: string;
  readonly deps: readonly string[];
  readonly onParentFailure: FlowParentPolicy;
  readonly clientId: string;
  readonly maxAttempts?: number;
  readonly backoff?: BackoffOptions;
  readonly priority?: number;
}

/** A flow's options checked: its nodes parents first (a topological order), defaults filled in. */
export interface ResolvedFlow {
  readonly id: string;
  readonly nodes: readonly ResolvedFlowNode[];
  readonly onComplete?: FlowCallback;
  readonly keepMs: number;
}

/**
 * Checks a flow before anything is written: ids (unique, valid), patterns, payloads (JSON, at most
 * `maxPayloadBytes` each), options, dependencies (known, no cycle). Throws `InvalidFlowError` naming the
 * node at fault.
 */
export function resolveFlow(options: FlowOptions, clientId: string, maxPayloadBytes: number): ResolvedFlow {
  if (typeof options !== 'object' || options === null || !Array.isArray(options.nodes)) {
    throw new InvalidFlowError('options must be { id?, nodes: [...], onComplete?, keepMs? }');
  }
  const id = options.id ?? newTaskId();
  const idProblem = flowIdProblem(id) ?? (id.includes('.') ? 'must not contain dots' : undefined);
  if (idProblem) throw new InvalidFlowError(`the flow id ${idProblem}, got ${describe(id)}`);
  if (options.nodes.length === 0 || options.nodes.length > MAX_FLOW_NODES) {
    throw new InvalidFlowError(`a flow has 1 to ${MAX_FLOW_NODES} nodes, got ${options.nodes.length}`);
  }
  // table-ok: lives for one call
  const byId = new Map<string, ResolvedFlowNode>();
  for (const [index, node] of options.nodes.entries()) {
    const resolved = resolveNode(node, index, clientId, maxPayloadBytes);
    if (byId.has(resolved.id)) throw new InvalidFlowError(`two nodes have the id "${resolved.id}"`, resolved.id);
    byId.set(resolved.id, resolved);
  }
  for (const node of byId.values()) {
    for (const dep of node.deps) {
      if (!byId.has(dep))
        throw new InvalidFlowError(`node "${node.id}" depends on "${dep}", which the flow does not have`, node.id);
      if (dep === node.id) throw new InvalidFlowError(`node "${node.id}" depends on itself`, node.id);
    }
  }
  const keepMs = options.keepMs ?? FLOW_DEFAULT_KEEP_MS;
  if (!Number.isInteger(keepMs) || keepMs < 1) {
    throw new InvalidFlowError(`keepMs must be a positive integer of milliseconds, got ${describe(keepMs)}`);
  }
  return {
    id,
    nodes: topologicalOrder(byId),
    onComplete: resolveCallback(options.onComplete, clientId),
    keepMs,
  };
}

/** A flow id or node id: a name (no braces, spaces, control characters) of at most 100 characters, no commas. */
export function flowIdProblem(value: unknown): string | undefined {
  if (typeof value === 'string' && value.length > MAX_FLOW_ID_LENGTH) {
    return `must be at most ${MAX_FLOW_ID_LENGTH} characters`;
  }
  return nameProblem(value) ?? ((value as string).includes(',') ? 'must not contain commas' : undefined);
}

function resolveNode(node: FlowNode, index: number, clientId: string, maxPayloadBytes: number): ResolvedFlowNode {
  if (typeof node !== 'object' || node === null) {
    throw new InvalidFlowError(`node ${index} must be { id, pattern, payload?, deps?, onParentFailure?, ... }`);
  }
  const fail = (message: string): never => {
    throw new InvalidFlowError(
      `node "${String(node.id)}": ${message}`,
      typeof node.id === 'string' ? node.id : undefined,
    );
  };
  const idProblem = flowIdProblem(node.id);
  if (idProblem) throw new InvalidFlowError(`node ${index}: its id ${idProblem}, got ${describe(node.id)}`);
  const patternIssue = patternProblem(node.pattern);
  if (patternIssue) fail(`pattern ${patternIssue}, got ${describe(node.pattern)}`);
  const deps = node.deps ?? [];
  if (!Array.isArray(deps) || deps.some((dep) => typeof dep !== 'string')) fail('deps must be an array of node ids');
  if (new Set(deps).size !== deps.length) fail('deps names a node twice');
  const policy = node.onParentFailure ?? 'fail-flow';
  if (!(policy in POLICY_LETTERS))
    fail(`onParentFailure must be 'fail-flow', 'skip' or 'run', got ${describe(policy)}`);
  const client = node.clientId ?? clientId;
  const clientIssue = nameProblem(client);
  if (clientIssue) fail(`clientId ${clientIssue}, got ${describe(client)}`);
  const where = (option: string, message: string): Error =>
    new InvalidFlowError(`node "${node.id}": ${option} ${message}`, node.id);
  if (node.maxAttempts !== undefined) validateMaxAttempts('maxAttempts', node.maxAttempts, where);
  if (node.backoff !== undefined) validateBackoff('backoff', node.backoff, where);
  if (node.priority !== undefined) {
    const problem = taskRules.priority(node.priority);
    if (problem) fail(`priority must be ${problem}, got ${describe(node.priority)}`);
  }
  let payloadJson: string | undefined;
  try {
    payloadJson = JSON.stringify(node.payload ?? null);
  } catch (error) {
    fail(`its payload is not JSON (${(error as Error).message})`);
  }
  const bytes = Buffer.byteLength(payloadJson as string);
  if (bytes > maxPayloadBytes) fail(`its payload is ${bytes} bytes, more than maxPayloadBytes (${maxPayloadBytes})`);
  return {
    id: node.id,
    pattern: node.pattern,
    payloadJson: payloadJson as string,
    deps,
    onParentFailure: policy,
    clientId: client,
    maxAttempts: node.maxAttempts,
    backoff: node.backoff,
    priority: node.priority,
  };
}

/** The nodes parents first (Kahn's order); a cycle is refused naming a node on it. */
function topologicalOrder(byId: ReadonlyMap<string, ResolvedFlowNode>): ResolvedFlowNode[] {
  // table-ok: lives for one call
  const left = new Map<string, number>();
  // table-ok: lives for one call
  const children = new Map<string, string[]>();
  for (const node of byId.values()) {
    left.set(node.id, node.deps.length);
    for (const dep of node.deps) children.set(dep, [...(children.get(dep) ?? []), node.id]);
  }
  const order: ResolvedFlowNode[] = [];
  const ready = [...byId.values()].filter((node) => node.deps.length === 0).map((node) => node.id);
  while (ready.length > 0) {
    const id = ready.shift() as string;
    order.push(byId.get(id) as ResolvedFlowNode);
    for (const child of children.get(id) ?? []) {
      const count = (left.get(child) as number) - 1;
      left.set(child, count);
      if (count === 0) ready.push(child);
    }
  }
  if (order.length < byId.size) {
    // A node left waits for one left too: following such parents as many steps as there are nodes ends on a cycle.
    let onCycle = [...left].find(([, count]) => count > 0)?.[0] as string;
    for (let step = 0; step < byId.size; step++) {
      onCycle = (byId.get(onCycle) as ResolvedFlowNode).deps.find((dep) => (left.get(dep) as number) > 0) as string;
    }
    throw new InvalidFlowError(`node "${onCycle}" is on a cycle of dependencies`, onCycle);
  }
  return order;
}

function resolveCallback(value: FlowCallback | undefined, clientId: string): FlowCallback | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'object' || value === null)
    throw new InvalidFlowError('onComplete must be { pattern, payload?, clientId? }');
  const problem = patternProblem(value.pattern);
  if (problem) throw new InvalidFlowError(`onComplete.pattern ${problem}, got ${describe(value.pattern)}`);
  const client = value.clientId ?? clientId;
  const clientProblem = nameProblem(client);
  if (clientProblem) throw new InvalidFlowError(`onComplete.clientId ${clientProblem}, got ${describe(client)}`);
  return value.payload === undefined
    ? { pattern: value.pattern, clientId: client }
    : { pattern: value.pattern, clientId: client, payload: value.payload };
}
