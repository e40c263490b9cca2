import type { ResolvedTransportOptions } from '../config/options.js';
import { ClosedError, RedisConfigurationError, RedisPermissionError, RedisUnavailableError } from '../model/errors.js';
import {
  closeConnection,
  describeServer,
  NotReadyError,
  openConnection,
  watchOf,
  type OwnedConnection,
} from '../redis/connection.js';
import { checkServer } from '../redis/guardrails.js';
import { permissionRefusal } from '../redis/refusals.js';
import type { RedisConnection, TaskRedis } from '../redis/scripts.js';
import type { TaskLogger } from '../support/logger.js';
import { scrubRedisError } from '../support/redact.js';

/**
 * The connection of a worker process: opened (and shown to the adapter, for its status events, before
 * anything is sent on it), waited for, checked, closed. A worker started before Redis (docker-compose,
 * Kubernetes) waits for it, logging once when it starts waiting and once when Redis answers;
 * `startupTimeoutMs` bounds the wait. A cause no retry heals (refused credentials, an untrusted
 * certificate) fails at once. The runtime runs on it; the transport holds it.
 */
export class WorkerConnection {
  private readonly owned: OwnedConnection;
  private closed = false;

  constructor(
    private readonly options: ResolvedTransportOptions,
    watch: (redis: RedisConnection) => void,
  ) {
    this.owned = openConnection(options.connection, `tasks:worker:${options.workerId}`);
    watch(this.owned.redis);
  }

  get redis(): TaskRedis {
    return this.owned.redis;
  }

  /**
   * Resolves once Redis answers and the start-up checks (version, eviction policy) passed. `waiting` is
   * told once when the worker starts to wait. Rejects when closed meanwhile (`ClosedError`), past
   * `startupTimeoutMs` (`RedisUnavailableError`), or for what no wait heals.
   */
  async ready(logger: TaskLogger, waiting: () => void): Promise<void> {
    const redis = this.redis;
    const watch = watchOf(redis, describeServer(this.options.connection));
    const started = Date.now();
    const limit = this.options.startupTimeoutMs;
    let told = false;
    for (;;) {
      if (this.closed) throw new ClosedError('RedisTaskTransport');
      try {
        await watch.whenReady(limit > 0 ? Math.max(1, Math.min(1_000, started + limit - Date.now())) : 1_000);
        await redis.ping();
        if (told) logger.log(`Redis at ${watch.server} answered after ${Date.now() - started} ms; starting`);
        break;
      } catch (error) {
        // Redis's own replies and misconfiguration end the wait; an unreachable server does not.
        if (!(error instanceof NotReadyError) && (error as Error).name === 'ReplyError') throw error;
        if (error instanceof RedisConfigurationError) throw error;
        if (!told) {
          told = true;
          waiting();
          logger.warn(
            `waiting for Redis at ${watch.server} (${watch.lastError ?? 'not reachable yet'}); the worker starts once it answers`,
          );
        }
        if (limit > 0 && Date.now() - started >= limit) {
          throw new RedisUnavailableError(
            '',
            watch.server,
            limit,
            false,
            `the worker gave up starting (startupTimeoutMs); last: ${watch.lastError ?? 'no answer'}`,
          );
        }
      }
    }
    await checkServer(redis, this.options.evictionPolicy, logger);
  }

  /** What a start that failed reports: an ACL refusal named as such, any other Redis error without its command arguments. */
  startupError(error: unknown): unknown {
    const refused = permissionRefusal(error);
    return refused
      ? new RedisPermissionError(this.options.prefix, refused.reply, refused.command)
      : scrubRedisError(error);
  }

  async close(): Promise<void> {
    this.closed = true;
    await closeConnection(this.owned);
  }
}
