import type { ResolvedClientOptions } from '../core/config/options.js';
import { TaskAdmin, type TaskAdminRedis } from '../core/admin/admin.js';
import { answeredWithin, answeringBy } from '../core/admin/readiness.js';
import type { CancelResult } from '../core/model/task-status.js';
import type { RedisConnection } from '../core/config/options.js';
import { scrubbing } from '../core/support/redact.js';

/** `RedisTaskClient.cancel`: answered within `enqueueTimeoutMs`, connecting first if need be. */
export function cancelWithin(
  options: ResolvedClientOptions,
  connect: () => Promise<RedisConnection>,
  pattern: string,
  id: string,
  reason?: string,
): Promise<CancelResult> {
  const { connection, enqueueTimeoutMs, prefix } = options;
  return answeredWithin(connection, enqueueTimeoutMs, 'cancel()', async (deadline) => {
    const redis = (await connect()) as TaskAdminRedis;
    await answeringBy(redis, connection, deadline, enqueueTimeoutMs, 'cancel()');
    return scrubbing(TaskAdmin.forPrefix(redis, prefix)).cancelTask(pattern, id, reason);
  });
}
