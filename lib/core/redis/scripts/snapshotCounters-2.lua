-- snapshotCounters-2.lua
-- Purpose: record the outcome counters as they stand in the current minute (once per minute, whoever
--   calls first: reapers on every sweep, the dashboard on every refresh), and forget the minutes older
--   than an hour, so per-minute rates over the last hour cost one read of a small hash.
-- Includes: clock
-- KEYS[1]: counters (hash: outcome -> count)
-- KEYS[2]: history (hash: minute since the epoch -> "<Redis ms> <completed> <failed> <retried> <deadLettered>")
-- ARGV: none
-- Returns: 1 when this call recorded the minute, 0 when it was recorded already (or a key holds another
--   type: then nothing is written and the dashboard shows no rate)
-- Side effects: HSETNX of the minute's field; HDEL of fields more than 60 minutes old (at most once a
--   minute, when the minute is recorded).
for i = 1, 2 do
  local kind = redis.call('TYPE', KEYS[i]).ok
  if kind ~= 'hash' and kind ~= 'none' then
    return 0
  end
end
local now = redisMs()
local minute = math.floor(now / 60000)
if redis.call('HEXISTS', KEYS[2], minute) == 1 then
  return 0
end
local counts = redis.call('HMGET', KEYS[1], 'completed', 'failed', 'retried', 'deadLettered')
local fields = { tostring(now) }
for i = 1, 4 do
  fields[i + 1] = tostring(tonumber(counts[i]) or 0)
end
redis.call('HSET', KEYS[2], minute, table.concat(fields, ' '))
local stale = {}
for _, field in ipairs(redis.call('HKEYS', KEYS[2])) do
  local at = tonumber(field)
  if not at or at < minute - 60 then
    stale[#stale + 1] = field
  end
end
if #stale > 0 then
  redis.call('HDEL', KEYS[2], unpack(stale))
end
return 1
