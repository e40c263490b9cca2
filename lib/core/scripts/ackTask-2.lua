-- ackTask-2.lua
-- Purpose: settle a task that succeeded: remove it from the worker's processing hash if the worker
--   still holds it under this fencing token; for a send() task, store and publish the reply.
-- KEYS[1]: processing hash of the worker (hash: fencing token -> encoded entry)
-- KEYS[2]: result key of the task (string; written only for a send() task)
-- ARGV[1]: fencing token
-- ARGV[2] (optional): reply channel; ARGV[3]: reply (JSON); ARGV[4]: result TTL in milliseconds
-- Returns: 1 when acknowledged; 0 when the token is no longer held (lease lost: nothing is changed)
-- Side effects: HDEL from the processing hash; for a reply, SET with PX on the result key and PUBLISH.
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if ARGV[2] then
  redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return 1
