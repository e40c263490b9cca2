import { Module, type DynamicModule, type Provider } from '@nestjs/common';
import { dashboardController } from './dashboard.controller.js';
import {
  resolvePath,
  resolveSettings,
  type RedisTaskDashboardAsyncOptions,
  type RedisTaskDashboardMount,
  type RedisTaskDashboardOptions,
} from './dashboard.options.js';
import { DASHBOARD_SETTINGS, DashboardService } from './dashboard.service.js';

/**
 * A web dashboard of the queues, mounted on the app's own HTTP server (Express or Fastify): an overview
 * of every pattern, each pattern's clients, groups and workers, and its dead letters, refreshed live.
 * Read-only unless `actions` is on, which needs a `guard`.
 *
 * ```ts
 * @Module({ imports: [RedisTaskDashboardModule.forRoot({ path: 'admin/queues', connection: process.env.REDIS_URL, guard: AdminGuard, actions: true })] })
 * ```
 */
@Module({})
export class RedisTaskDashboardModule {
  static forRoot(options: RedisTaskDashboardOptions = {}): DynamicModule {
    const settings = resolveSettings(options, options); // bad options fail here, where the module is defined
    return this.define(options, { provide: DASHBOARD_SETTINGS, useValue: settings });
  }

  static forRootAsync(options: RedisTaskDashboardAsyncOptions): DynamicModule {
    return this.define(options, {
      provide: DASHBOARD_SETTINGS,
      useFactory: async (...args: never[]) => resolveSettings(await options.useFactory(...args), options),
      inject: (options.inject ?? []) as never[],
    });
  }

  private static define(mount: RedisTaskDashboardMount, settings: Provider): DynamicModule {
    const guard = mount.guard;
    return {
      module: RedisTaskDashboardModule,
      imports: mount.imports ?? [],
      controllers: [dashboardController(resolvePath(mount.path), guard)],
      providers: [settings, DashboardService, ...(typeof guard === 'function' ? [guard] : [])],
    };
  }
}
