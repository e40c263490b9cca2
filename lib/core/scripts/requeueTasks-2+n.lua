-- requeueTasks-2+n.lua
-- Purpose: return claimed tasks from a worker's processing hash to the HEAD of their clients' pending
--   lists (graceful shutdown, a restarted worker resuming its own hash, recovery of a dead worker).
--   Only tokens still present are moved, so two processes recovering the same worker cannot requeue a
--   task twice, and a task settled meanwhile is left alone.
-- KEYS[1]: processing hash of the worker (hash: fencing token -> encoded entry)
-- KEYS[2]: ring (list of client ids with pending tasks)
-- KEYS[3..n+2]: pending lists the tasks return to (list of encoded entries)
-- ARGV[1]: 1 to count the interrupted run as an attempt, 0 not to
-- ARGV[2..]: triples of fencing token, index into KEYS of its client's pending list, client id;
--   pass tokens newest first so that the LPUSHes restore the original order
-- Returns: integer, the number of tasks requeued
-- Side effects: HDEL from the processing hash, LPUSH onto pending lists, the entry's attempt prefix
--   incremented when counted; a client whose list was empty is pushed onto the ring's head.
local countAttempt = ARGV[1] == '1'
local requeued = 0
for i = 2, #ARGV, 3 do
  local token = ARGV[i]
  local entry = redis.call('HGET', KEYS[1], token)
  if entry then
    redis.call('HDEL', KEYS[1], token)
    if countAttempt then
      local attempts, rest = string.match(entry, '^(%d+)|(.*)$')
      if attempts then
        entry = tostring(tonumber(attempts) + 1) .. '|' .. rest
      end
    end
    if redis.call('LPUSH', KEYS[tonumber(ARGV[i + 1])], entry) == 1 then
      redis.call('LPUSH', KEYS[2], ARGV[i + 2])
    end
    requeued = requeued + 1
  end
end
return requeued
