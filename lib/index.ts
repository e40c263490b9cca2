export { RedisTaskTransport } from './nest/redis-task.transport.js';
export { RedisTaskClient } from './nest/redis-task.client.js';
export { RedisTaskBatch } from './nest/redis-task-batch.js';
/** What `emit` and `emitBatch` report per task: its id, and whether it was refused as a duplicate. */
export type { EnqueueReceipt, EnqueueReceipt as RedisTaskReceipt } from './core/producer/producer.js';
export type { TaskOptions } from './core/producer/task-items.js';
export type { RedisConnection } from './core/redis/scripts.js';
export { RedisTaskContext, type RedisTaskInfo, type RunControl, type StepOptions } from './nest/redis-task.context.js';
export {
  RedisTaskRecord,
  RedisTaskRecordBuilder,
  type RedisTaskRecordOptions,
} from './nest/redis-task-record.builder.js';
export { RedisTaskModule } from './nest/redis-task.module.js';
export {
  REDIS_TASK_MODULE_OPTIONS,
  RedisTaskConfigurableModule,
  type RedisTaskModuleOptions,
} from './nest/redis-task.module-definition.js';
export { RedisTaskReaper } from './nest/redis-task.reaper.js';
export { RedisTaskAdmin } from './nest/redis-task.admin.js';
export type {
  DeadLetterFilter,
  DeadLetterPage,
  DeadLetterSelection,
  QueueCounters,
  QueueFault,
  QueueStats,
  RemovedGroup,
  RequeueDeadLettersResult,
  ScheduleInfo,
  TriggerResult,
  UpsertResult,
  WorkerInfo,
} from './core/admin/admin.js';
export type { MissedPolicy, ScheduleSpec, ScheduleState, StoredSpec } from './core/model/schedule.js';
export type { ScheduleTickEvent } from './core/schedules/tick-firer.js';
export { TaskSchedule, type TaskScheduleSpec } from './nest/task-schedule.decorator.js';
export type { DeletedPrefix } from './core/admin/prefix-cleanup.js';
export type { PatternState } from './core/admin/state.js';
export type { SweepResult } from './core/reaper/reaper.js';
export type { TaskOutcomeEvent, TaskOutcomeKind } from './core/model/outcomes.js';
export type { TaskProgressEvent } from './core/worker/worker-types.js';
export type { CancelResult, TaskState, TaskStatus, TrackOptions } from './core/model/task-status.js';
export type { CoalesceMode, CoalesceOptions } from './core/model/coalesce.js';
export type { BatchCallback, BatchCancelResult, BatchOptions, BatchStatus, BatchSummary } from './core/model/batch.js';
export type {
  FlowCallback,
  FlowCancelResult,
  FlowError,
  FlowNode,
  FlowNodeInfo,
  FlowNodeState,
  FlowNodeStatus,
  FlowOptions,
  FlowParentPolicy,
  FlowParentResult,
  FlowReceipt,
  FlowState,
  FlowStatus,
  FlowSummary,
} from './core/model/flow.js';
export type { RedisMemory } from './core/admin/memory.js';
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
  type ResolvedClientOptions,
  type ResolvedTransportOptions,
} from './core/config/options.js';
export {
  ClosedError,
  DuplicateTaskError,
  HandlerTimeoutError,
  StepTooLargeError,
  TaskYieldedError,
  InvalidOptionError,
  InvalidTaskError,
  BatchIdInUseError,
  InvalidFlowError,
  NonRetryableTaskError,
  PayloadTooLargeError,
  RedisConfigurationError,
  RedisFullError,
  ResultTooLargeError,
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
  PrefixInUseError,
  InvalidScheduleError,
  ScheduleHeldError,
  ScheduleNotFoundError,
  TaskCancelledError,
  TaskReplacedError,
} from './core/model/errors.js';
export type { ReplyError, ReplyMessage } from './core/model/reply.js';
export {
  DEAD_LETTER_REASONS,
  type DeadLetterReason,
  type DeadLetterRecord,
  type ErrorRecord,
} from './core/model/dead-letter.js';
// The key names are documented (docs/WIRE-FORMAT.md), the classes that build them are not public.
export { DEFAULT_GROUP, MAX_SHARDS } from './core/redis/keys.js';
export { UnsafeRedisError, type EvictionPolicyCheck } from './core/redis/guardrails.js';
export { ACL_COMMANDS, aclRule } from './core/redis/acl.js';
/** The transactional outbox's seams (the module itself: `nestjs-redis-tasks/outbox`). */
export type { OutboxRow, OutboxWriter } from './core/outbox/outbox-store.js';
export type { RelayTarget, RelayedTask, RelayCounts } from './core/outbox/outbox-relay.js';
export type {
  ResolvedOutboxOptions,
  RedisTaskOutboxOptions,
  OutboxExecutor,
  OutboxDialect,
} from './core/outbox/outbox-options.js';
export type { AfterCommitCounts } from './core/outbox/after-commit.js';
export { REDIS_TASK_OUTBOX_STATS, type OutboxStatsSource, type RedisTaskOutboxStats } from './nest/outbox-stats.js';
