import { EventEmitter } from 'node:events';
import type { Logger } from '@nestjs/common';
import type { RedisConnection } from '../core/config/options.js';
import { OutageReporter } from '../core/support/logger.js';
import { scrubRedisError } from '../core/support/redact.js';
import { RedisTaskStatus } from './redis-task.events.js';

/**
 * Turns a connection's ioredis events into status changes (one log line per change, an outage logged
 * once with its length) and forwards them to `on()` listeners.
 */
export function watchConnection(
  redis: RedisConnection,
  emitter: EventEmitter,
  publishStatus: (status: RedisTaskStatus) => void,
  logger: Logger,
): void {
  const outage = new OutageReporter(logger, 'Redis connection');
  redis.on('ready', () => {
    outage.succeeded();
    publishStatus(RedisTaskStatus.CONNECTED);
  });
  redis.on('reconnecting', () => {
    // A connection cut without an error (CLIENT KILL, a failover) is an outage too.
    outage.failed(new Error('the connection closed'));
    publishStatus(RedisTaskStatus.RECONNECTING);
  });
  redis.on('end', () => publishStatus(RedisTaskStatus.DISCONNECTED));
  redis.on('error', (error: Error) => {
    outage.failed(error);
    if (emitter.listenerCount('error') > 0) {
      emitter.emit('error', scrubRedisError(error));
    }
  });
}
