import { Module } from '@nestjs/common';
import { InvalidOptionError } from '../core/model/errors.js';
import { RedisTaskAdmin } from './redis-task.admin.js';
import { RedisTaskClient } from './redis-task.client.js';
import {
  REDIS_TASK_MODULE_OPTIONS,
  RedisTaskConfigurableModule,
  type RedisTaskModuleOptions,
} from './redis-task.module-definition.js';
import { RedisTaskReaper } from './redis-task.reaper.js';
import { TransportPresence } from './transport-presence.js';

/**
 * Registers an injectable `RedisTaskClient`, the `RedisTaskReaper` (recovers dead workers' tasks,
 * promotes due retries, on a schedule) and `RedisTaskAdmin`. Everything closes with the application.
 *
 * ```ts
 * @Module({ imports: [RedisTaskModule.forRoot({ clientId: 'api' })] })
 * @Module({ imports: [RedisTaskModule.forRootAsync({ useFactory: (c: ConfigService) => ({ ... }), inject: [ConfigService] })] })
 * ```
 */
@Module({
  providers: [
    {
      provide: RedisTaskClient,
      useFactory: (options: RedisTaskModuleOptions) => {
        const { reaperIntervalMs, scheduleCheckMs, ...clientOptions } = options ?? {};
        if (scheduleCheckMs !== undefined && scheduleCheckMs !== false) {
          if (typeof scheduleCheckMs !== 'number' || !Number.isInteger(scheduleCheckMs) || scheduleCheckMs < 50) {
            throw new InvalidOptionError(
              'scheduleCheckMs',
              `must be false or an integer of at least 50, got ${String(scheduleCheckMs)}`,
            );
          }
        }
        if (reaperIntervalMs !== undefined && reaperIntervalMs !== false) {
          if (typeof reaperIntervalMs !== 'number' || !Number.isInteger(reaperIntervalMs) || reaperIntervalMs < 10) {
            throw new InvalidOptionError(
              'reaperIntervalMs',
              `must be false or an integer of at least 10, got ${String(reaperIntervalMs)}`,
            );
          }
        }
        return new RedisTaskClient(clientOptions);
      },
      inject: [REDIS_TASK_MODULE_OPTIONS],
    },
    RedisTaskReaper,
    RedisTaskAdmin,
    TransportPresence,
  ],
  exports: [RedisTaskClient, RedisTaskReaper, RedisTaskAdmin],
})
export class RedisTaskModule extends RedisTaskConfigurableModule {}
