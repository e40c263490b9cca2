-- sealBatch-2.lua
-- Purpose: seal a batch (no more children); when every child settled already, it fires at once (see
--   include/batchRecord.lua's batchFire). Sealing a sealed batch answers as the first seal did.
-- Includes: guard, batchRecord
-- KEYS[1]: the batch's record (hash)
-- KEYS[2]: its children (hash: task id -> outcome and seq)
-- ARGV: none
-- Returns: batchFire's answer; { -1 } when the batch has no record
-- Side effects: HSET of the record's state (sealed); see batchFire.
expectTypes(KEYS[1], 'hash', KEYS[2], 'hash')
local state = redis.call('HGET', KEYS[1], 'state')
if not state then
  return { -1 }
end
if state == 'open' then
  redis.call('HSET', KEYS[1], 'state', 'sealed')
end
return batchFire(KEYS[1], KEYS[2])
