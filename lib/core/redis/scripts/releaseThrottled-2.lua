-- releaseThrottled-2.lua
-- Purpose: put rate-limited clients whose next token is due back on the ring, so claims visit them
--   again (a throttled client has pending tasks and is off the ring while it waits).
-- Includes: guard
-- KEYS[1]: throttled (sorted set: client id -> when its next token is due, Redis time in ms)
-- KEYS[2]: ring (list of client ids with pending tasks)
-- ARGV[1]: now (Redis time in ms)
-- Returns: array { released, nextDue }: how many clients went back to the ring, and the earliest due
--   time still in the set (0 when it is empty)
-- Side effects: ZREM from throttled and RPUSH to the ring of each due client (a client left with no
--   task is dropped from the ring by the next claim that visits it).
-- Checked before the first write: a failed check changes nothing.
-- No throttled client (the common case: no rate limit, or none at its limit): one command, nothing to check.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return { 0, 0 }
end
expectTypes(KEYS[1], 'zset', KEYS[2], 'list')
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 1000)
for _, client in ipairs(due) do
  redis.call('ZREM', KEYS[1], client)
  wakeWorkers(KEYS[2], redis.call('RPUSH', KEYS[2], client), 1)
end
local next = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local nextDue = 0
if next[2] then
  nextDue = tonumber(next[2])
end
return { #due, nextDue }
