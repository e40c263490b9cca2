-- requeueDeadLetters-2+n.lua
-- Purpose: give dead letters a fresh run: remove each record from the dead letters and append its
--   task (attempts reset) to its client's pending list, atomically per record, so a record requeued by
--   two callers at once runs once.
-- KEYS[1]: dead letters (list of JSON records)
-- KEYS[2]: ring (list of client ids with pending tasks)
-- KEYS[3..n+2]: pending lists the tasks go to (list of encoded entries)
-- ARGV: quadruples of the dead-letter record (exactly as stored), index into KEYS of its client's
--   pending list, client id, and the fresh encoded entry
-- Returns: integer, the number of dead letters requeued
-- Side effects: LREM from the dead letters, RPUSH onto pending lists; a client whose list was empty is
--   pushed onto the ring's tail.
local requeued = 0
for i = 1, #ARGV, 4 do
  if redis.call('LREM', KEYS[1], 1, ARGV[i]) == 1 then
    if redis.call('RPUSH', KEYS[tonumber(ARGV[i + 1])], ARGV[i + 3]) == 1 then
      redis.call('RPUSH', KEYS[2], ARGV[i + 2])
    end
    requeued = requeued + 1
  end
end
return requeued
