/**
 * `nestjs-redis-tasks/terminus`: a health indicator for `@nestjs/terminus` (an optional peer
 * dependency); the main entry point never loads it.
 */
export { RedisTaskHealthIndicator, type RedisTaskHealthOptions } from './nest/redis-task.health.js';
