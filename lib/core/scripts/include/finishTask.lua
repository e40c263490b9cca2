-- include/finishTask.lua — shared by the scripts whose header says "Includes: finishTask".
-- finishTask(dedupKey, holder, resultKey, channel, reply, ttl)
--   What every final settle does after the task left the processing hash: frees its deduplication key
--   if this task (holder, '' for none) still holds it, and for a send() task (channel set) stores the
--   reply under the result key for ttl ms and publishes it.
local function finishTask(dedupKey, holder, resultKey, channel, reply, ttl)
  if holder ~= '' and redis.call('GET', dedupKey) == holder then
    redis.call('DEL', dedupKey)
  end
  if channel then
    redis.call('SET', resultKey, reply, 'PX', ttl)
    redis.call('PUBLISH', channel, reply)
  end
end
