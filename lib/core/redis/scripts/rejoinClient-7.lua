-- rejoinClient-7.lua
-- Purpose: put back on the ring a client that has pending tasks but is not on the ring, parked at its
--   cap, or throttled: nothing would ever claim its tasks (a hand edit, a lost ring key), and a new emit
--   for it would not bring it back (its list is not empty). Found by the reaper's ring audit; the
--   client's tasks are counted back into the pending count and the repair is recorded in faults.
-- Includes: guard
-- KEYS[1]: ring (list of client ids with pending tasks)
-- KEYS[2]: parked (set of clients taken off the ring at their cap)
-- KEYS[3]: throttled (sorted set: client id -> when its next token is due)
-- KEYS[4]: the client's pending list
-- KEYS[5]: the client's priority set
-- KEYS[6]: pending count (string counter of the shard's pending tasks, all clients; see pushTask)
-- KEYS[7]: faults (hash: broken data found and what was done; see guard)
-- ARGV[1]: the client id
-- Returns: the number of the client's pending tasks put back in reach (0 when it was in reach, or has none)
-- Side effects: RPUSH of the client onto the ring; INCRBY of the pending count; HSET of faults.
-- Checked before the first write: a failed check changes nothing.
expectTypes(KEYS[1], 'list', KEYS[2], 'set', KEYS[3], 'zset', KEYS[4], 'list', KEYS[5], 'zset', KEYS[7], 'hash')
local waiting = redis.call('LLEN', KEYS[4]) + redis.call('ZCARD', KEYS[5])
if waiting == 0 then
  return 0
end
local client = ARGV[1]
if redis.call('LPOS', KEYS[1], client) or redis.call('SISMEMBER', KEYS[2], client) == 1 or redis.call('ZSCORE', KEYS[3], client) then
  return 0
end
wakeWorkers(KEYS[1], redis.call('RPUSH', KEYS[1], client), 1)
healingIncr(KEYS[7], KEYS[6], waiting, waiting)
recordFault(KEYS[7], KEYS[4], 'had ' .. waiting .. ' pending task(s) but its client was off the ring; put back')
return waiting
