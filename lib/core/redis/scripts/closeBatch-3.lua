-- closeBatch-3.lua
-- Purpose: record that a fired batch's callbacks were enqueued (so no reaper enqueues them again), with a
--   week (or `keep`, if longer) before its keys expire in case no callback ever settles; a callback's
--   settle starts the real countdown, `keep` ms (foldBatch), or starts it here when one settled already.
-- Includes: guard, batchRecord
-- KEYS[1]: the batch's record (hash)
-- KEYS[2]: its children (hash: task id -> outcome and seq)
-- KEYS[3]: its patterns (set)
-- ARGV[1]: the callback task ids, comma-separated (`batch.<batch id>.<which>`: batch ids have no commas)
-- Returns: { 1, the callbacks that settled already... } when recorded now (a settled callback's
--   deduplication guard can go: nothing can enqueue it again); { 2 } when they were on record already;
--   { 0 } when the batch has no record or has not fired
-- Side effects: HSET of the record's callbacks; PEXPIRE of the record, its children and its patterns.
expectTypes(KEYS[1], 'hash', KEYS[2], 'hash', KEYS[3], 'set')
local fields = redis.call('HMGET', KEYS[1], 'fired', 'keep', 'callbacks')
if not fields[1] then
  return { 0 }
end
if fields[3] then
  return { 2 }
end
redis.call('HSET', KEYS[1], 'callbacks', ARGV[1])
local keep = tonumber(fields[2]) or 86400000
local all, settled = batchCallbacksSettled(KEYS[1], ARGV[1])
if not all then
  keep = math.max(keep, 604800000)
end
redis.call('PEXPIRE', KEYS[1], keep)
redis.call('PEXPIRE', KEYS[2], keep)
redis.call('PEXPIRE', KEYS[3], keep)
local answer = { 1 }
for _, id in ipairs(settled) do
  answer[#answer + 1] = id
end
return answer
