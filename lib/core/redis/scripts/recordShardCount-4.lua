-- recordShardCount-4.lua
-- Purpose: record the shard count a queue is used with, the first time it is used, and report the
--   count on record, so producers and workers configured with another count can be refused.
-- Includes: guard
-- KEYS[1]: the queue's shard count (string, in the queue's unsharded hash tag)
-- KEYS[2]: the unsharded ring (list of client ids)
-- KEYS[3]: the unsharded delayed set (zset)
-- KEYS[4]: the unsharded worker registry (zset); a queue used before counts were recorded has its
--   work in these three
-- ARGV[1]: the caller's shard count
-- Returns: the count on record (integer); a queue with no record gets ARGV[1], or 1 when its unsharded
--   keys already hold work (an unsharded queue from before counts were recorded).
-- Side effects: SET of KEYS[1] when absent (no TTL: the count lives as long as the queue).
local recorded = checkedCall('string', 'GET', KEYS[1])
if recorded then
  return tonumber(recorded)
end
local count = ARGV[1]
if redis.call('EXISTS', KEYS[2], KEYS[3], KEYS[4]) > 0 then
  count = '1'
end
redis.call('SET', KEYS[1], count)
return tonumber(count)
