-- forgetWorker-3.lua
-- Purpose: remove a dead worker from a queue's registry once its processing hash is empty, unless it
--   renewed its lease meanwhile (it was only slow, and is alive again).
-- Includes: guard
-- KEYS[1]: workers (sorted set: worker id -> lease expiry, Redis time in milliseconds)
-- KEYS[2]: processing hash of the worker (hash: fencing token -> encoded entry)
-- KEYS[3]: heartbeats (hash: worker id -> time of its last heartbeat)
-- ARGV[1]: worker id; ARGV[2]: the time (ms) the lease had to have expired by
-- Returns: 1 when removed; 0 when the worker renewed its lease or still holds tasks
-- Side effects: ZREM and HDEL of the worker id.
-- Checked before the first write: a failed check changes nothing.
expectTypes(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'hash')
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expiry or tonumber(expiry) > tonumber(ARGV[2]) then
  return 0
end
if redis.call('HLEN', KEYS[2]) > 0 then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return 1
