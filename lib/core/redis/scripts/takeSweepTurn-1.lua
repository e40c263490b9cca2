-- takeSweepTurn-1.lua
-- Purpose: give the periodic sweep of a prefix to one process at a time: the caller takes the turn when
--   none is held, or when the one held was taken at least its own interval ago, so a deployment sweeps
--   about once per the shortest interval among its processes, whatever their number.
-- Includes: guard, clock
-- KEYS[1]: the turn (string: `<owner>|<Redis ms when taken>`, expiring after its taker's turn length)
-- ARGV[1]: the caller's id; ARGV[2]: its turn length in milliseconds
-- Returns: 1 when the caller has the turn now, 0 when another process's turn goes on
-- Side effects: SET of the turn with a TTL of ARGV[2] ms when taken.
local held = checkedCall('string', 'GET', KEYS[1])
local now = redisMs()
local length = tonumber(ARGV[2])
if held then
  local taken = tonumber(string.match(held, '|(%d+)$'))
  if taken and now - taken < length then
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. now, 'PX', length)
return 1
