-- addBatchChildren-3.lua
-- Purpose: count tasks as children of an open batch before they are enqueued (so the batch can never
--   complete without them), or take back children whose enqueue wrote nothing (so it does not wait for
--   them). A task id added twice (a resend) counts once, and is taken back once. Adding also notes the
--   pattern the tasks go to (where a cancel looks for them).
-- Includes: guard
-- KEYS[1]: the batch's record (hash)
-- KEYS[2]: its children (hash: task id -> outcome and seq)
-- KEYS[3]: its patterns (set: the patterns its tasks were added to)
-- ARGV[1]: '+' to add, '-' to take back; ARGV[2]: the pattern (adding); ARGV[3..]: the children's task ids
-- Returns: 'open' when added (or taken back); else the batch's state (sealed, cancelled; 'unknown' when it
--   has no record), and nothing was changed
-- Side effects: HSETNX of each child as waiting (`p/0`) and SADD of the pattern, or HDEL of each child still
--   waiting with no event applied (`p/0`); HINCRBY of the record's total by the children added or taken back.
expectTypes(KEYS[1], 'hash', KEYS[2], 'hash', KEYS[3], 'set')
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'open' then
  return state or 'unknown'
end
local changed = 0
for i = 3, #ARGV do
  if ARGV[1] == '+' then
    changed = changed + redis.call('HSETNX', KEYS[2], ARGV[i], 'p/0')
  elseif redis.call('HGET', KEYS[2], ARGV[i]) == 'p/0' then
    changed = changed - redis.call('HDEL', KEYS[2], ARGV[i])
  end
end
if ARGV[1] == '+' then
  redis.call('SADD', KEYS[3], ARGV[2])
end
redis.call('HINCRBY', KEYS[1], 'total', changed)
return 'open'
