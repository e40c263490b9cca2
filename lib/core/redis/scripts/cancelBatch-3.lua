-- cancelBatch-3.lua
-- Purpose: cancel a batch: no task can be added to it any more, and it completes (its callbacks enqueued,
--   see include/batchRecord.lua) once each of its tasks settled, taken out of its queue or stopped by the
--   caller (cancelTask, dropHeld) or not. Cancelling a cancelled batch changes nothing.
-- Includes: guard
-- KEYS[1]: the batch's record (hash)
-- KEYS[2]: its children (hash: task id -> outcome and seq)
-- KEYS[3]: its patterns (set: the patterns its tasks were added to)
-- ARGV: none
-- Returns: { state before ('unknown' when it has no record), the patterns... }
-- Side effects: HSET of the record's state (cancelled).
expectTypes(KEYS[1], 'hash', KEYS[2], 'hash', KEYS[3], 'set')
local state = redis.call('HGET', KEYS[1], 'state')
if not state then
  return { 'unknown' }
end
redis.call('HSET', KEYS[1], 'state', 'cancelled')
local answer = { state }
for _, pattern in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  answer[#answer + 1] = pattern
end
return answer
