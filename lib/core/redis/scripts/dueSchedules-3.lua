-- dueSchedules-3.lua
-- Purpose: the schedules whose next tick has come, by Redis time (read-only: any process may ask; the
--   fire and its advance are made exactly once by enqueueTasks' call record and advanceSchedule).
-- Includes: guard
-- KEYS[1]: schedules (hash: schedule id -> the stored schedule)
-- KEYS[2]: due (sorted set: schedule id -> its next tick, Redis time in ms)
-- KEYS[3]: state (hash: schedule id -> what its last ticks did, JSON)
-- ARGV[1]: at most this many schedules
-- Returns: array { now, later, id, tick, stored schedule (or false), state (or false), id, ... }: Redis
--   time in ms, the earliest tick after now (0: none), then per due schedule four fields.
-- Side effects: none.
local now = redis.call('TIME')
local nowMs = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local later = checkedCall('zset', 'ZRANGEBYSCORE', KEYS[2], '(' .. nowMs, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
local reply = { nowMs, later[2] and tonumber(later[2]) or 0 }
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', nowMs, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
for i = 1, #due, 2 do
  reply[#reply + 1] = due[i]
  reply[#reply + 1] = tonumber(due[i + 1])
  reply[#reply + 1] = checkedCall('hash', 'HGET', KEYS[1], due[i])
  reply[#reply + 1] = checkedCall('hash', 'HGET', KEYS[3], due[i])
end
return reply
