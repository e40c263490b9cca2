/**
 * `nestjs-redis-tasks/testing`: end-to-end tests of your own handlers on a real Redis. Needs
 * `@nestjs/testing` (which Nest apps have as a dev dependency); the main entry point never loads it.
 */
export {
  createRedisTaskTestingApp,
  deleteRedisTaskPrefix,
  type RedisTaskTestingApp,
  type RedisTaskTestingOptions,
} from './nest/redis-task.testing.js';
