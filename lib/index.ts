export { RedisTaskTransport } from './nest/redis-task.transport.js';
export { RedisTaskClient, type RedisTaskReceipt } from './nest/redis-task.client.js';
export { RedisTaskContext, type RedisTaskInfo, type RunControl } from './nest/redis-task.context.js';
export {
  RedisTaskRecord,
  RedisTaskRecordBuilder,
  type RedisTaskRecordOptions,
} from './nest/redis-task-record.builder.js';
export { RedisTaskModule } from './nest/redis-task.module.js';
export { REDIS_TASK_MODULE_OPTIONS, type RedisTaskModuleOptions } from './nest/redis-task.module-definition.js';
export { RedisTaskReaper } from './nest/redis-task.reaper.js';
export { RedisTaskAdmin } from './nest/redis-task.admin.js';
export {
  TaskAdmin,
  type DeadLetterFilter,
  type DeadLetterSelection,
  type QueueCounters,
  type QueueStats,
  type RemovedGroup,
  type RequeueDeadLettersResult,
  type WorkerInfo,
} from './core/admin/admin.js';
export type { SweepResult } from './core/reaper/reaper.js';
export type { TaskOutcomeEvent, TaskOutcomeKind } from './core/model/outcomes.js';
export type { BackoffOptions, RetryOptions } from './core/model/retry-policy.js';
export { RedisTaskStatus, type RedisTaskEvents } from './nest/redis-task.events.js';
export { REDIS_TASK_TRANSPORT } from './nest/constants.js';
export {
  DEFAULT_CONNECTION,
  type RedisTaskClientOptions,
  type RedisTaskCommonOptions,
  type DurabilityOptions,
  type RedisTaskConnection,
  type RedisTaskTransportOptions,
} from './core/config/options.js';
export {
  ClosedError,
  DuplicateTaskError,
  HandlerTimeoutError,
  InvalidOptionError,
  InvalidTaskError,
  NonRetryableTaskError,
  PayloadTooLargeError,
  RedisConfigurationError,
  RedisPermissionError,
  RedisTaskError,
  RedisUnavailableError,
  ReplicationTimeoutError,
  ReplyTimeoutError,
  ShardCountMismatchError,
  DeadLetterTaskError,
  LeaseLostError,
  RetryTaskError,
  TaskFailedError,
  UnserializableResultError,
  WorkerIdInUseError,
} from './core/model/errors.js';
export type { ReplyError, ReplyMessage } from './core/model/reply.js';
export type { DeadLetterReason, DeadLetterRecord, ErrorRecord } from './core/model/dead-letter.js';
export { DEFAULT_GROUP, MAX_SHARDS, PrefixKeys, QueueKeys, QueueLayout } from './core/redis/keys.js';
export { UnsafeRedisError, type EvictionPolicyCheck } from './core/redis/guardrails.js';
export { ACL_COMMANDS, aclRule } from './core/redis/acl.js';
