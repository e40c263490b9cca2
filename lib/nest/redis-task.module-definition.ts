import { ConfigurableModuleBuilder } from '@nestjs/common';
import type { RedisTaskClientOptions } from '../core/config/options.js';

/** Options of `RedisTaskModule.forRoot`: the client's, plus the reaper's schedule. */
export interface RedisTaskModuleOptions extends RedisTaskClientOptions {
  /** Interval of the module's `RedisTaskReaper` in ms, or false to only sweep on demand. Default 1,000. */
  reaperIntervalMs?: number | false;
  /**
   * Longest wait between two checks for due recurring schedules in the module's `RedisTaskReaper` (ms),
   * or false to fire none here. It sleeps until the earliest tick and is woken when a schedule is stored (a
   * subscriber connection of its own), so this is only the backstop. Default 60,000 (false when
   * `reaperIntervalMs` is false; 1,000 when it cannot subscribe).
   */
  scheduleCheckMs?: number | false;
}

export const { ConfigurableModuleClass: RedisTaskConfigurableModule, MODULE_OPTIONS_TOKEN: REDIS_TASK_MODULE_OPTIONS } =
  new ConfigurableModuleBuilder<RedisTaskModuleOptions>()
    .setClassMethodName('forRoot')
    // spread-ok: once per module
    .setExtras({ isGlobal: false }, (definition, extras) => ({ ...definition, global: extras.isGlobal }))
    .build();
