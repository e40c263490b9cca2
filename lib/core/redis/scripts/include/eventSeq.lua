-- include/eventSeq.lua — shared by the includes whose header says "Needs: eventSeq" (batch, flow).
-- Needs: guard, clock
-- nextEventSeq(base)
--   The next number of the shard's one sequence of settle events, `<base>:batch-seq` (INCR), for the batch and
--   flow events a settle writes in its own slot: increasing within the base, where a task spends its whole life,
--   so a record applies each task's events in order however often they are folded. A counter made anew
--   (first use, lost, or of another type and set aside) starts at the Redis clock in µs, past any number it
--   gave before.
local function nextEventSeq(base)
  local faults, counter = base .. ':faults', base .. ':batch-seq'
  local seq = redis.pcall('INCR', counter)
  if type(seq) ~= 'number' or seq == 1 then
    if type(seq) ~= 'number' then
      quarantineKey(faults, counter, 'string')
    end
    seq = redisMicros()
    redis.call('SET', counter, string.format('%d', seq))
  end
  return seq
end
