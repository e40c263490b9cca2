-- include/ackHeld.lua — shared by the scripts whose header says "Includes: ackHeld".
-- Needs: guard
-- Acknowledging succeeded tasks, each fenced on its own token, as claimTasks (plain tasks riding on a
-- claim) and ackTasks (tasks with a reply or a deduplication key) both do.
-- heldOf(processing, tokens)
--   Which tokens the worker still holds: held[i] is the entry of tokens[i], or false (the lease was lost,
--   the task is someone else's). Read in slices of ACK_SLICE (unpack's limit is a few thousand values; a
--   turn's acknowledgements may be as many as a worker's concurrency, up to 10,000). Fails before any write
--   when the processing hash is not a hash (checkedCall).
-- removeSettled(processing, settled, counters)
--   The settled tokens leave the processing hash (HDEL, in slices) and the counters' `completed` grows by
--   how many were removed. Returns that number.
local ACK_SLICE = 1000

local function heldOf(processing, tokens)
  local held = {}
  for from = 1, #tokens, ACK_SLICE do
    local slice = checkedCall('hash', 'HMGET', processing, unpack(tokens, from, math.min(from + ACK_SLICE - 1, #tokens)))
    for i = 1, #slice do
      held[from + i - 1] = slice[i]
    end
  end
  return held
end

local function removeSettled(processing, settled, counters)
  local removed = 0
  for from = 1, #settled, ACK_SLICE do
    removed = removed + redis.call('HDEL', processing, unpack(settled, from, math.min(from + ACK_SLICE - 1, #settled)))
  end
  if removed > 0 then
    countOutcome(counters, 'completed', removed)
  end
  return removed
end
