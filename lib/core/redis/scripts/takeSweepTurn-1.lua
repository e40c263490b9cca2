-- takeSweepTurn-1.lua
-- Purpose: give the periodic sweep of a prefix to one process at a time: the caller takes the turn when
--   none is held, or when the one held was taken at least its own interval ago, so a deployment sweeps
--   about once per the shortest interval among its processes, whatever their number.
-- Includes: guard, clock
-- KEYS[1]: the turn (string: `<owner>|<turn number>|<Redis ms when taken>`, expiring twenty turn lengths
--   after it was taken)
-- ARGV[1]: the caller's id; ARGV[2]: its turn length in milliseconds
-- Returns: the turn's number (1 after none, else one more than the last; each turn sweeps its own slice of
--   shards) when the caller has the turn now, 0 when another process's turn goes on
-- Side effects: SET of the turn with a TTL of 20 * ARGV[2] ms when taken.
local held = checkedCall('string', 'GET', KEYS[1])
local now = redisMs()
local length = tonumber(ARGV[2])
local number = 1
if held then
  local last, taken = string.match(held, '|(%d+)|(%d+)$')
  if taken and now - tonumber(taken) < length then
    return 0
  end
  number = (tonumber(last) or 0) % 1000000000 + 1
end
-- Kept for twenty turns (a turn's end is its taken time, not the TTL), so the numbering goes on between turns.
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. number .. '|' .. now, 'PX', 20 * length)
return number
