-- promoteTasks-2+n.lua
-- Purpose: move due tasks from the delayed set to the tails of their clients' pending lists. Only
--   entries still in the delayed set move, so concurrent promoters never enqueue a task twice.
-- KEYS[1]: delayed (sorted set: encoded entry -> due time)
-- KEYS[2]: ring (list of client ids with pending tasks)
-- KEYS[3..n+2]: pending lists the tasks go to (list of encoded entries)
-- ARGV: triples of encoded entry, index into KEYS of its client's pending list, client id
-- Returns: integer, the number of tasks promoted
-- Side effects: ZREM from the delayed set, RPUSH onto pending lists; a client whose list was empty is
--   pushed onto the ring's tail (waking a blocked worker).
local promoted = 0
for i = 1, #ARGV, 3 do
  if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
    if redis.call('RPUSH', KEYS[tonumber(ARGV[i + 1])], ARGV[i]) == 1 then
      redis.call('RPUSH', KEYS[2], ARGV[i + 2])
    end
    promoted = promoted + 1
  end
end
return promoted
