-- closeBatch-2.lua
-- Purpose: record that a fired batch's callbacks were enqueued (so no reaper enqueues them again), with a
--   week (or `keep`, if longer) before its record expires in case no callback ever settles; a callback's
--   settle starts the real countdown, `keep` ms (foldBatch).
-- Includes: guard
-- KEYS[1]: the batch's record (hash)
-- KEYS[2]: its children (hash: task id -> outcome and seq)
-- ARGV[1]: the callback task ids, comma-separated (`batch.<batch id>.<which>`: batch ids have no commas)
-- Returns: 1 when recorded now; 2 when they were on record already; 0 when the batch has no record or has not
--   fired
-- Side effects: HSET of the record's callbacks; PEXPIRE of the record and its children.
expectTypes(KEYS[1], 'hash', KEYS[2], 'hash')
local fields = redis.call('HMGET', KEYS[1], 'fired', 'keep', 'callbacks')
if not fields[1] then
  return 0
end
if fields[3] then
  return 2
end
redis.call('HSET', KEYS[1], 'callbacks', ARGV[1])
local keep = math.max(tonumber(fields[2]) or 86400000, 604800000)
redis.call('PEXPIRE', KEYS[1], keep)
redis.call('PEXPIRE', KEYS[2], keep)
return 1
