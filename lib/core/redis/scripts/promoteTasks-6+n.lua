-- promoteTasks-6+n.lua
-- Purpose: move due tasks from the delayed set to their clients' pending tasks. Only entries still in
--   the delayed set move, so concurrent promoters never enqueue a task twice.
--   Each task is pushed before it leaves the delayed set, so a failure at any step never loses it.
-- Includes: guard, pushTask
-- KEYS[1]: delayed (sorted set: encoded entry -> due time)
-- KEYS[2]: ring (list of client ids with pending tasks)
-- KEYS[3]: sequence (string counter; orders equal priorities)
-- KEYS[4]: prioritized (string counter of prioritized pending tasks)
-- KEYS[5]: faults (hash: broken data found and what was done; see guard)
-- KEYS[6]: pending count (string counter of the shard's pending tasks, all clients; see pushTask)
-- KEYS[7..n+6]: pending lists and priority sets the tasks go to
-- ARGV: per task, 5 fields: encoded entry, index into KEYS of its client's pending list, index of its
--   client's priority set, client id, priority
-- Returns: integer, the number of tasks promoted
-- Side effects: ZREM from the delayed set (after the push), RPUSH onto pending lists or ZADD onto priority sets (INCR of
--   prioritized and of the pending count); a client
--   with no other pending task is pushed onto the ring's tail (waking a blocked worker).
expectTypes(KEYS[1], 'zset', KEYS[2], 'list')
local promoted = 0
for i = 1, #ARGV, 5 do
  -- Pushed while still in the delayed set, then removed: a failure between the two never loses it.
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    pushTask(KEYS[tonumber(ARGV[i + 1])], KEYS[tonumber(ARGV[i + 2])], KEYS[2], KEYS[3], KEYS[4], ARGV[i + 3], ARGV[i],
      tonumber(ARGV[i + 4]) or 0, false, KEYS[5], KEYS[6])
    redis.call('ZREM', KEYS[1], ARGV[i])
    promoted = promoted + 1
  end
end
return promoted
