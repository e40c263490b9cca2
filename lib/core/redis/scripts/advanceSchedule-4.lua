-- advanceSchedule-4.lua
-- Purpose: finish a fire that claimSchedules gave this process: record what its ticks did, and move the
--   schedule on to its next tick. Only the holder of the take (its firing entry still names this lease)
--   finishes it, once: a process whose lease ended and whose schedule another process took again changes
--   nothing (that process fires the same ticks, which enqueueTasks' call records keep to one task each, and
--   records them). What the ticks did is recorded even when an operator paused, resumed, changed or
--   orphaned the schedule meanwhile (its ticks ran); the due entry is moved on only while it is still the
--   take's (an operator's change placed it, or took it away, otherwise).
-- Includes: guard
-- KEYS[1]: schedules (hash: schedule id -> the stored schedule)
-- KEYS[2]: due (sorted set: schedule id -> its next tick, or the end of a firer's lease, Redis time in ms)
-- KEYS[3]: state (hash: schedule id -> what its last ticks did, JSON)
-- KEYS[4]: firing (hash: schedule id -> `<tick>|<lease end>` while a process fires it)
-- ARGV[1]: the schedule id
-- ARGV[2]: the version the caller fired under
-- ARGV[3]: the take's firing entry (`<tick>|<lease end>`)
-- ARGV[4]: the next tick (ms; 0: none is left, the schedule ended; -1: fire the same tick again at ARGV[6])
-- ARGV[5]: the new state (JSON)
-- ARGV[6]: with ARGV[4] -1, when to take it again (Redis ms)
-- Returns: 1 when finished by this call; 0 when the take was not (or no longer) this caller's.
-- Side effects: HDEL of the firing entry (or its lease moved, ARGV[4] -1); HSET of the state while the
--   schedule exists; ZADD (or ZREM, when ended) of its due entry while it is still the take's.
local id = ARGV[1]
if checkedCall('hash', 'HGET', KEYS[4], id) ~= ARGV[3] then
  return 0
end
local tick, leaseEnd = string.match(ARGV[3], '^(%d+)|(%d+)$')
local stored = checkedCall('hash', 'HGET', KEYS[1], id)
if not stored then
  redis.call('HDEL', KEYS[4], id)
  return 1
end
local dueAt = checkedCall('zset', 'ZSCORE', KEYS[2], id)
expectTypes(KEYS[3], 'hash')
redis.call('HSET', KEYS[3], id, ARGV[5])
local ours = tonumber(dueAt) == tonumber(leaseEnd) and string.match(stored, '^(%d+)|') == ARGV[2]
local next = tonumber(ARGV[4])
if next == -1 then
  -- Held: the same tick is taken again later (still the take's, so no other process fires it meanwhile).
  if ours then
    local again = tonumber(ARGV[6])
    redis.call('ZADD', KEYS[2], again, id)
    redis.call('HSET', KEYS[4], id, tick .. '|' .. string.format('%d', again))
    return 1
  end
  redis.call('HDEL', KEYS[4], id)
  return 1
end
redis.call('HDEL', KEYS[4], id)
if ours then
  if next > 0 then
    redis.call('ZADD', KEYS[2], next, id)
  else
    redis.call('ZREM', KEYS[2], id)
  end
end
return 1
