-- countFlow-2.lua
-- Purpose: count a flow's creation or end in the prefix's flow counters once, however often it is sent (a
--   resend after a reconnection, a due check after a crash between the count and its record on the flow,
--   markFlow-5.lua): each count takes its flow's marker first, and only the call that made the marker counts.
--   A batch's opening and completion are counted the same way in the batch counters.
-- Includes: guard
-- KEYS[1]: the flows' counters (hash: created, succeeded, failed, cancelled), or the batches' (opened, completed)
-- KEYS[2]: the count's marker (string, `<prefix>:{%F}:counted:<flow id>:<generation>:<c|e>`, or
--   `<prefix>:{%B}:counted:<batch id>:<generation>:<o|c>`)
-- ARGV[1]: the counter (created, succeeded, failed, cancelled; opened, completed); ARGV[2]: how long the marker lives (ms)
-- Returns: 1 when counted now; 0 when counted before
-- Side effects: SET of the marker with NX and PX; HINCRBY of the counter.
expectTypes(KEYS[1], 'hash')
if not redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 0
end
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
return 1
