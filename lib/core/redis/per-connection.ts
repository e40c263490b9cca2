import type { TaskRedis } from './scripts.js';

/** One `T` per connection, made on first use and shared by everything using that connection. */
export function perConnection<T>(make: (redis: TaskRedis) => T): (redis: TaskRedis) => T {
  const made = new WeakMap<TaskRedis, T>();
  return (redis) => {
    let value = made.get(redis);
    if (value === undefined) {
      value = make(redis);
      made.set(redis, value);
    }
    return value;
  };
}
