import type { TaskAdmin } from '../core/admin/admin.js';
import type { TaskCliErrors } from './task-commands.js';

const json = (value: unknown) => JSON.stringify(value, null, 2);

/** `batch show|cancel <id>`: one batch by id (exit 4 when it has no record). */
export async function batch(
  admin: TaskAdmin,
  args: readonly string[],
  options: { readonly json: boolean },
  errors: TaskCliErrors,
): Promise<string> {
  const [verb, id, ...rest] = args;
  if (verb !== 'show' && verb !== 'cancel') throw errors.usage(`unknown batch command "${verb ?? ''}" (show, cancel)`);
  if (!id || rest.length > 0) throw errors.usage(`batch ${verb} takes a batch id`);
  const unknown = () => errors.notFound(`no batch ${id} (never opened, expired, or another --prefix)`);
  if (verb === 'show') {
    const status = await admin.getBatch(id);
    if (status.state === 'unknown') throw unknown();
    if (options.json) return json(status);
    const time = (ms: number | undefined) => (ms === undefined ? undefined : new Date(ms).toISOString());
    const lines: [string, unknown][] = [
      ['batch', `${status.id} (${status.state})`],
      [
        'tasks',
        `${status.total}: ${status.pending} pending, ${status.succeeded} succeeded, ${status.failed} failed, ${status.cancelled} cancelled`,
      ],
      ['callback', status.callbackIds ? `${status.callback} (${status.callbackIds.join(', ')})` : status.callback],
      ['opened', time(status.createdAt)],
      ['completed', time(status.firedAt)],
    ];
    return lines
      .filter(([, value]) => value !== undefined)
      .map(([name, value]) => `${name}: ${String(value)}`)
      .join('\n');
  }
  const result = await admin.cancelBatch(id);
  if (!result.cancelled) throw unknown();
  if (options.json) return json(result);
  return `batch ${id}: cancelled (it was ${result.was}); ${result.removed} waiting task(s) removed, ${result.stopped} running stopped`;
}
