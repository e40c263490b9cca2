-- advanceSchedule-3.lua
-- Purpose: move a schedule on from the tick it was due at to its next one, once: only when it is still
--   due at that tick under the same version (compare and set). Several processes firing the same tick
--   all send this; the first moves the schedule on and records what the tick did, the others change
--   nothing (their fire found enqueueTasks' call record of the first, so no second task was written).
-- Includes: guard
-- KEYS[1]: schedules (hash: schedule id -> the stored schedule)
-- KEYS[2]: due (sorted set: schedule id -> its next tick, Redis time in ms)
-- KEYS[3]: state (hash: schedule id -> what its last ticks did, JSON)
-- ARGV[1]: the schedule id
-- ARGV[2]: the version the caller fired under
-- ARGV[3]: the tick it was due at (ms)
-- ARGV[4]: the next tick (ms; 0: none is left, the schedule ended)
-- ARGV[5]: the new state (JSON)
-- Returns: 1 when moved on; 0 when another process did first, or the schedule changed or went.
-- Side effects: ZADD (or ZREM, when ended) of its due entry; HSET of its state.
expectTypes(KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'hash')
local id = ARGV[1]
local stored = redis.call('HGET', KEYS[1], id)
if not stored or string.match(stored, '^(%d+)|') ~= ARGV[2] then
  return 0
end
local due = redis.call('ZSCORE', KEYS[2], id)
if not due or tonumber(due) ~= tonumber(ARGV[3]) then
  return 0
end
local next = tonumber(ARGV[4])
if next > 0 then
  redis.call('ZADD', KEYS[2], next, id)
else
  redis.call('ZREM', KEYS[2], id)
end
redis.call('HSET', KEYS[3], id, ARGV[5])
return 1
