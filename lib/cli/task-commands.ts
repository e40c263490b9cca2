import type { TaskAdmin } from '../core/admin/admin.js';
import type { TaskStatus } from '../core/model/task-status.js';

/** The `task` commands' failures, as the CLI reports them. */
export interface TaskCliErrors {
  usage(message: string): Error;
  notFound(message: string): Error;
}

const json = (value: unknown) => JSON.stringify(value, null, 2);

/** `task show|cancel <pattern> <id>`: one tracked task by id (exit 4 when it has no index). */
export async function task(
  admin: TaskAdmin,
  args: readonly string[],
  options: { readonly json: boolean; readonly reason?: string },
  errors: TaskCliErrors,
): Promise<string> {
  const [verb, pattern, id, ...rest] = args;
  if (verb !== 'show' && verb !== 'cancel') throw errors.usage(`unknown task command "${verb ?? ''}" (show, cancel)`);
  if (!pattern || !id || rest.length > 0) throw errors.usage(`task ${verb} takes a pattern and a task id`);
  const unknown = () =>
    errors.notFound(`no tracked task ${id} on "${pattern}" (not tracked, expired, or another --prefix/--group)`);
  if (verb === 'show') {
    const status = await admin.getTask(pattern, id);
    if (status.state === 'unknown') throw unknown();
    return options.json ? json(status) : describeStatus(status);
  }
  const result = await admin.cancelTask(pattern, id, options.reason ?? '');
  if (!result.cancelled && result.state === 'unknown') throw unknown();
  if (options.json) return json(result);
  return result.cancelled
    ? `task ${id}: cancelled (it was ${result.was})`
    : `task ${id}: not cancelled, it had already ended (${result.state})`;
}

/** A status as `field: value` lines, times as ISO dates. */
function describeStatus(status: TaskStatus): string {
  const time = (ms: number | undefined) => (ms === undefined ? undefined : new Date(ms).toISOString());
  const lines: [string, unknown][] = [
    ['task', `${status.id} of "${status.pattern}" (group ${status.group ?? 'default'})`],
    ['state', status.cancelRequested ? `${status.state}, cancel requested` : status.state],
    ['client', status.clientId],
    ['enqueued', time(status.enqueuedAt)],
    ['changed', time(status.changedAt)],
    ['priority', status.priority],
    ['waiting in its client', status.clientPending],
    ['due', time(status.dueAt)],
    ['why', status.why],
    ['worker', status.workerId],
    ['attempt', status.attempt],
    ['started', time(status.startedAt)],
    ['lease until', time(status.leaseExpiresAt)],
    ['was', status.was],
    ['reason', status.reason],
    ['detail', status.detail],
    ['progress', status.progress === undefined ? undefined : JSON.stringify(status.progress)],
    ['result', status.result === undefined ? undefined : JSON.stringify(status.result)],
    ['error', status.error === undefined ? undefined : JSON.stringify(status.error)],
  ];
  return lines
    .filter(([, value]) => value !== undefined)
    .map(([name, value]) => `${name}: ${String(value)}`)
    .join('\n');
}
