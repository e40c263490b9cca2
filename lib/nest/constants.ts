/** Transport id of `RedisTaskTransport`: `@EventPattern(p, REDIS_TASK_TRANSPORT)` binds to it alone. */
export const REDIS_TASK_TRANSPORT = Symbol('RedisTaskTransport');
