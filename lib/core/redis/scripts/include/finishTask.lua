-- include/finishTask.lua — shared by the scripts whose header says "Includes: finishTask".
-- finishTask(dedupKey, holder, resultKey, channel, reply, ttl)
--   What every final settle does for the task: frees its deduplication key if this task (holder, ''
--   for none) still holds it, and for a send() task (channel set) stores the reply under the result key
--   for ttl ms and publishes it. Cannot fail: a deduplication key of another type is not this task's,
--   and SET replaces whatever the result key held.
local function finishTask(dedupKey, holder, resultKey, channel, reply, ttl)
  if holder ~= '' and redis.pcall('GET', dedupKey) == holder then
    redis.call('DEL', dedupKey)
  end
  if channel then
    redis.call('SET', resultKey, reply, 'PX', ttl)
    redis.call('PUBLISH', channel, reply)
  end
end
