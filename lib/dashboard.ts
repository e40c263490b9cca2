// nestjs-redis-tasks/dashboard: a web dashboard of the queues, mounted in the app's own Nest HTTP server.
export { RedisTaskDashboardModule } from './nest/dashboard/dashboard.module.js';
export type {
  RedisTaskDashboardAsyncOptions,
  RedisTaskDashboardMount,
  RedisTaskDashboardOptions,
  RedisTaskDashboardSettings,
} from './nest/dashboard/dashboard.options.js';
export type {
  ClientPage,
  ClientRow,
  MinuteRate,
  Overview,
  PatternOverview,
  RunningTask,
} from './core/admin/overview.js';
