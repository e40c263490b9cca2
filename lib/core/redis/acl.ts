import { LUA_INCLUDES, LUA_SCRIPTS } from './scripts/sources.generated.js';

/**
 * Upper-case words of the scripts that are arguments, not commands (`ZRANGEBYSCORE ... WITHSCORES LIMIT`,
 * `SET ... PX`, an error's `WRONGTYPE`): every other upper-case string literal in a script is a command it
 * sends. A test checks each derived name against a live Redis's `COMMAND INFO`, so a new argument word
 * that is not a command fails there, and a new command is in the rule without anyone listing it.
 */
const SCRIPT_ARGUMENT_WORDS = new Set([
  'PX',
  'EX',
  'NX',
  'XX',
  'KEEPTTL',
  'WITHSCORES',
  'LIMIT',
  'LEFT',
  'RIGHT',
  'WRONGTYPE',
  'REPLACE',
]);

/** The commands the Lua scripts send (helpers included), derived from their sources, lower case. */
export function scriptCommands(): string[] {
  const found = new Set<string>();
  for (const lua of [...Object.values(LUA_SCRIPTS), ...Object.values(LUA_INCLUDES)]) {
    for (const [, word] of lua.matchAll(/'([A-Z][A-Z]+)'/g)) {
      if (!SCRIPT_ARGUMENT_WORDS.has(word)) found.add(word.toLowerCase());
    }
  }
  return [...found].sort();
}

/**
 * The commands the library sends outside its scripts (producers, workers, reapers, the admin API, the
 * dashboard, the CLI, health and metrics). Checked at run time: a test runs every feature as a user holding
 * exactly `aclRule(prefix)` and finds `ACL LOG` empty. INFO and CONFIG GET are optional: without them the
 * start-up checks warn instead of checking.
 */
const CLIENT_COMMANDS: readonly string[] = [
  // connection: RESP3 handshake, names, liveness
  'hello',
  'auth',
  'ping',
  'quit',
  'client|setname',
  'client|getname',
  'client|id',
  // a worker of several patterns ends its idle loops' shared BLPOP when another loop starts waiting (BellWatch)
  'client|unblock',
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
  // the claim loop's hand-off (a blocking connection lent to a loop with work, waiting on its shard's bell)
  'blpop',
  // reads and writes of the admin API, the reapers and the schedules outside scripts
  'get',
  // a worker's read of out-of-line payloads after its claim (one per turn and shard)
  'mget',
  'set',
  'del',
  'unlink',
  'exists',
  'type',
  'hget',
  'hgetall',
  'hmget',
  'hset',
  'hdel',
  'hincrby',
  'hlen',
  'hkeys',
  'hvals',
  'hexists',
  'lrange',
  'llen',
  'lindex',
  'ltrim',
  'rpush',
  'lpush',
  'lrem',
  'zadd',
  'zrem',
  'zcard',
  'zscore',
  'zrange',
  'zrangebyscore',
  'sadd',
  'srem',
  'smembers',
  'scard',
  'sismember',
  'pttl',
  'pexpire',
  // finding a prefix's keys (the reapers' audit of stray queues, and removing a prefix)
  'scan',
  // the Cluster layout check (read only; on a standalone server it is refused and skipped)
  'cluster|keyslot',
  // optional: the start-up checks (Redis version, maxmemory-policy) and the health check's memory reading;
  // refused, they only warn
  'info',
  'config|get',
];

/** Every command the library may send, inside scripts or not (lower case, `command|subcommand`). */
export const ACL_COMMANDS: readonly string[] = [...new Set([...CLIENT_COMMANDS, ...scriptCommands()])].sort();

/**
 * The ACL rule (keys, channels, commands) for a user of one prefix, as `ACL SETUSER` takes it. Keys and
 * channels are those the library names under the prefix (`<prefix>:{…}` and `<prefix>:queues`; reply
 * channels `<prefix>:replies:` and 16 lower-case hex digits): not `<prefix>:*`, which would also grant a
 * neighbouring prefix such as `<prefix>:eu` (whose keys start `<prefix>:eu:{`).
 */
export function aclRule(prefix: string): string {
  return [
    'resetkeys',
    `~${prefix}:{*`,
    `~${prefix}:queues`,
    'resetchannels',
    `&${prefix}:{*`,
    `&${prefix}:replies:${'[0-9a-f]'.repeat(16)}`,
    '-@all',
    ...ACL_COMMANDS.map((command) => `+${command}`),
  ].join(' ');
}
