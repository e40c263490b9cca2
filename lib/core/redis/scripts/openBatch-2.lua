-- openBatch-2.lua
-- Purpose: open a batch (see include/batchRecord.lua): its record made once, with its callbacks. Opening
--   an open batch again (a resend, or a producer that lost the answer) changes nothing.
-- Includes: guard
-- KEYS[1]: the batch's record (hash)
-- KEYS[2]: its children (hash: task id -> outcome and seq)
-- ARGV[1]: the complete callback (JSON); ARGV[2]: the success callback (JSON, '' none); ARGV[3]: how long
--   the record is kept once a callback settled (ms)
-- Returns: { 'opened' } when opened now; else { the batch's state ('open' when open already, sealed,
--   cancelled), ms until its keys expire (-1: they do not yet: its callbacks have not all settled) }
-- Side effects: HSET of the record's fields when it is new.
expectTypes(KEYS[1], 'hash', KEYS[2], 'hash')
local state = redis.call('HGET', KEYS[1], 'state')
if state then
  return { state, redis.call('PTTL', KEYS[1]) }
end
redis.call('HSET', KEYS[1], 'state', 'open', 'total', 0, 'succeeded', 0, 'dead', 0, 'cancelled', 0, 'complete', ARGV[1],
  'keep', ARGV[3], 'created', redisMs())
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], 'success', ARGV[2])
end
return { 'opened' }
