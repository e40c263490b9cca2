/**
 * `nestjs-redis-tasks/metrics`: Prometheus metrics. Needs `prom-client` (an optional peer dependency);
 * the main entry point never loads it.
 */
export {
  RedisTaskMetrics,
  REDIS_TASK_METRICS_OPTIONS,
  type RedisTaskMetricsOptions,
} from './nest/redis-task.metrics.js';
