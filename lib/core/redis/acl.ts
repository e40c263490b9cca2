/**
 * The least-privilege Redis ACL of a deployment: every key and channel under one prefix (the prefix
 * stands outside the hash tags for this), and only the commands producers, workers, reapers and the
 * admin API send, inside scripts or not. INFO and CONFIG GET are optional: without them the start-up
 * checks warn instead of checking.
 */
export const ACL_COMMANDS: readonly string[] = [
  // connection: RESP3 handshake, names, liveness
  'hello',
  'auth',
  'ping',
  'quit',
  'client|setname',
  'client|getname',
  'client|id',
  'select',
  // scripts: loaded with EVAL once per connection, then run with EVALSHA
  'eval',
  'evalsha',
  // wake-ups, replies, durability
  'subscribe',
  'unsubscribe',
  'publish',
  'wait',
  'multi',
  'exec',
  'time',
  // lists
  'lmove',
  'lindex',
  'lrem',
  'lpop',
  'rpush',
  'lpush',
  'llen',
  'lrange',
  'ltrim',
  'lpos',
  // sorted sets
  'zpopmin',
  'zadd',
  'zcard',
  'zrem',
  'zscore',
  'zrange',
  'zrangebyscore',
  // hashes
  'hget',
  'hset',
  'hdel',
  'hmget',
  'hincrby',
  'hexists',
  'hkeys',
  'hlen',
  'hgetall',
  'hvals',
  // strings, keys, sets
  'get',
  'set',
  'del',
  'incrby',
  'decr',
  'exists',
  'type',
  'rename',
  'sadd',
  'srem',
  'smembers',
  'scard',
  'srandmember',
  // optional: the start-up checks (Redis version, maxmemory-policy); refused, they only warn
  'info',
  'config|get',
];

/** The ACL rule (keys, channels, commands) for a user of one prefix, as `ACL SETUSER` takes it. */
export function aclRule(prefix: string): string {
  return [
    `resetkeys`,
    `~${prefix}:*`,
    `resetchannels`,
    `&${prefix}:*`,
    '-@all',
    ...ACL_COMMANDS.map((command) => `+${command}`),
  ].join(' ');
}
