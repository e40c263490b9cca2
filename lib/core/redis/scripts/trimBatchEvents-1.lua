-- trimBatchEvents-1.lua
-- Purpose: drop the batch events a reaper folded, from the head of a slot's event list, only if they are
--   still its head: another reaper that folded and dropped them first leaves them gone, and the events
--   that came after them are never dropped unfolded.
-- Includes: guard
-- KEYS[1]: the slot's batch events (list; see include/batch.lua)
-- ARGV[1]: how many were folded; ARGV[2]: the first of them; ARGV[3]: the last of them
-- Returns: 1 when dropped; 0 when they were no longer the list's head
-- Side effects: LTRIM of the list.
local count = tonumber(ARGV[1]) or 0
if count < 1 or checkedCall('list', 'LINDEX', KEYS[1], 0) ~= ARGV[2] or redis.call('LINDEX', KEYS[1], count - 1) ~= ARGV[3] then
  return 0
end
redis.call('LTRIM', KEYS[1], count, -1)
return 1
