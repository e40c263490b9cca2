/**
 * `nestjs-redis-tasks/outbox`: the transactional outbox (README "Enqueue inside a transaction"), built on
 * `@nestjs-cls/transactional` (an optional peer dependency, with `nestjs-cls`); the main entry point never
 * loads it.
 */
export {
  RedisTaskOutbox,
  RedisTaskOutboxModule,
  REDIS_TASK_OUTBOX_OPTIONS,
  type RedisTaskOutboxStats,
} from './nest/redis-task-outbox.js';
export type {
  OutboxDialect,
  OutboxExecutor,
  RedisTaskOutboxOptions,
  ResolvedOutboxOptions,
} from './core/outbox/outbox-options.js';
export type { AfterCommitCounts } from './core/outbox/after-commit.js';
export type { OutboxRow, OutboxWriter } from './core/outbox/outbox-store.js';
export type { OutboxStats } from './core/outbox/outbox-store.js';
export type { RelayCounts } from './core/outbox/outbox-relay.js';
export type { OutboxReceipt } from './core/outbox/outbox-rows.js';
export { outboxMigration } from './core/outbox/outbox-migration.js';
export { mysqlDriverExecutor, postgresDriverExecutor } from './core/outbox/driver-executors.js';
