-- foldBatch-3.lua
-- Purpose: apply the settle events of a batch's children (read from the per-slot event lists, see
--   include/batch.lua) to its record, then fire it when it completed (include/batchRecord.lua). Each
--   child's events apply in order and once, however often they come: an event older than the last one
--   applied to its child (its seq) changes nothing, so reapers may fold the same events at once, or again
--   after a crash, without a lock. Events of a task that is not a child of the batch are ignored, but for
--   its callbacks' (`batch.<batch id>.complete` and `.success`: they carry the batch too): each one that
--   settled (succeeded or dead-lettered) is noted, and once every callback on record settled, the batch's
--   keys expire `keep` ms later (a callback that settled before the callbacks were on record, a fast one or a
--   crash before closeBatch, is counted there).
-- Includes: guard, batchRecord
-- KEYS[1]: the batch's record (hash)
-- KEYS[2]: its children (hash: task id -> outcome and seq)
-- KEYS[3]: its patterns (set)
-- ARGV[1]: the batch id; ARGV[2..]: per event, 3 fields: seq, task id, outcome (s, d, c, p)
-- Returns: batchFire's answer; { -1 } when the batch has no record (expired or never opened: its events
--   are dropped)
-- Side effects: HSET of each child's outcome and seq; HINCRBY of the record's counts (succeeded, dead,
--   cancelled) by the moves between them; HSET of `settled/<callback id>` on the record; PEXPIRE of the
--   record, its children and its patterns once every callback on record settled; see batchFire.
expectTypes(KEYS[1], 'hash', KEYS[2], 'hash', KEYS[3], 'set')
if redis.call('EXISTS', KEYS[1]) == 0 then
  return { -1 }
end
local callbackOf = { ['batch.' .. ARGV[1] .. '.complete'] = true, ['batch.' .. ARGV[1] .. '.success'] = true }
for i = 2, #ARGV, 3 do
  local seq, child, outcome = tonumber(ARGV[i]) or 0, ARGV[i + 1], ARGV[i + 2]
  local known = redis.call('HGET', KEYS[2], child)
  if not known and (outcome == 's' or outcome == 'd') and callbackOf[child] then
    redis.call('HSET', KEYS[1], 'settled/' .. child, 1)
    local fields = redis.call('HMGET', KEYS[1], 'callbacks', 'keep')
    if fields[1] and batchCallbacksSettled(KEYS[1], fields[1]) then
      local keep = tonumber(fields[2]) or 86400000
      redis.call('PEXPIRE', KEYS[1], keep)
      redis.call('PEXPIRE', KEYS[2], keep)
      redis.call('PEXPIRE', KEYS[3], keep)
    end
  end
  if known then
    local was, at = string.match(known, '^(%a)/(%d+)$')
    if was and seq > tonumber(at) then
      redis.call('HSET', KEYS[2], child, outcome .. '/' .. string.format('%d', seq))
      if was ~= outcome then
        if BATCH_COUNT[was] then
          redis.call('HINCRBY', KEYS[1], BATCH_COUNT[was], -1)
        end
        if BATCH_COUNT[outcome] then
          redis.call('HINCRBY', KEYS[1], BATCH_COUNT[outcome], 1)
        end
      end
    end
  end
end
return batchFire(KEYS[1], KEYS[2])
