import type { TaskAdmin } from '../core/admin/admin.js';
import type { FlowNodeStatus } from '../core/model/flow.js';
import type { TaskCliErrors } from './task-commands.js';

const json = (value: unknown) => JSON.stringify(value, null, 2);

/** A node in one line: its state, pattern, parents and result or error (a result cut at 80 characters). */
function nodeLine(node: FlowNodeStatus): string {
  const after = node.deps.length > 0 ? ` after ${node.deps.join(', ')}` : '';
  const policy = node.deps.length > 0 && node.onParentFailure !== 'fail-flow' ? ` (${node.onParentFailure})` : '';
  const result = node.result === undefined ? '' : JSON.stringify(node.result);
  const outcome = node.error
    ? `: ${node.error.message}`
    : result
      ? ` -> ${result.length > 80 ? `${result.slice(0, 79)}…` : result}`
      : '';
  return `  ${node.id} [${node.state}] ${node.pattern}${after}${policy}${outcome}`;
}

/** `flow show|cancel <id>`: one flow by id (exit 4 when it has no record). */
export async function flow(
  admin: TaskAdmin,
  args: readonly string[],
  options: { readonly json: boolean; readonly reason?: string },
  errors: TaskCliErrors,
): Promise<string> {
  const [verb, id, ...rest] = args;
  if (verb !== 'show' && verb !== 'cancel') throw errors.usage(`unknown flow command "${verb ?? ''}" (show, cancel)`);
  if (!id || rest.length > 0) throw errors.usage(`flow ${verb} takes a flow id`);
  const unknown = () => errors.notFound(`no flow ${id} (never created, expired, or another --prefix)`);
  if (verb === 'show') {
    const status = await admin.getFlow(id);
    if (status.state === 'unknown') throw unknown();
    if (options.json) return json(status);
    const time = (ms: number | undefined) => (ms === undefined ? undefined : new Date(ms).toISOString());
    const lines: [string, unknown][] = [
      ['flow', `${status.id} (${status.state}${status.ended ? ', ended' : ''})`],
      ['reason', status.reason],
      ['created', time(status.createdAt)],
      ['ended', time(status.endedAt)],
      ['callback', status.callbackId],
    ];
    return [
      ...lines.filter(([, value]) => value !== undefined).map(([name, value]) => `${name}: ${String(value)}`),
      `nodes: ${status.nodes.length}`,
      ...status.nodes.map(nodeLine),
    ].join('\n');
  }
  const result = await admin.cancelFlow(id, options.reason);
  if (!result.cancelled && result.state === 'unknown') throw unknown();
  if (options.json) return json(result);
  return result.cancelled
    ? `flow ${id}: cancelled; ${result.stopped} released node(s) being stopped, its waiting ones cancelled`
    : `flow ${id}: not cancelled, it ended ${result.state}`;
}
