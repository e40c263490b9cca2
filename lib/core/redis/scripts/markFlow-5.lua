-- markFlow-5.lua
-- Purpose: record what a flow's releaser did after a fold (see foldFlow-5.lua): nodes enqueued (`released`:
--   q -> r, so a later fold does not answer them again), nodes that will never be enqueued (`gone`: not on
--   record as enqueued, their release guard taken by a stop first: q -> c), its completion callback enqueued
--   (`callback`: on record, so nobody enqueues it again), or its creation and end counted (`counted`: c, e; see
--   countFlow-2.lua). Once it ended, its end is counted and its callback (if it has one) on record, its keys
--   expire `keep` ms later. Each applies once however often it is sent.
-- Includes: guard, flowRecord
-- KEYS[1]: the flow's record (hash)
-- KEYS[2]: its nodes (hash: node id -> state and seq)
-- KEYS[3]: their edges (hash)
-- KEYS[4]: their specs (hash)
-- KEYS[5]: their results (hash: node id -> JSON)
-- ARGV[1]: what: released, gone, callback or counted; ARGV[2..]: the node ids (released, gone), the callback's
--   task id (callback), or the letters counted (counted)
-- Returns: how many nodes changed (released, gone); 1 when recorded now, 0 when it was before (callback,
--   counted); -1 when the flow has no record
-- Side effects: HSET of the nodes' states (gone: and their why); HSET of `callback` or `counted`; PEXPIRE of
--   the five keys by `keep` once the flow is done with.
flowKeys()
local fields = redis.call('HMGET', KEYS[1], 'state', 'callback', 'keep', 'counted', 'ended', 'complete')
if not fields[1] then
  return -1
end
if ARGV[1] == 'callback' or ARGV[1] == 'counted' then
  local callback, counted, done = fields[2], fields[4] or '', 0
  if ARGV[1] == 'callback' and not callback then
    callback, done = ARGV[2], 1
    redis.call('HSET', KEYS[1], 'callback', callback)
  elseif ARGV[1] == 'counted' then
    for letter in string.gmatch(ARGV[2] or '', '%a') do
      if not string.find(counted, letter, 1, true) then
        counted, done = counted .. letter, 1
      end
    end
    redis.call('HSET', KEYS[1], 'counted', counted)
  end
  if fields[5] and string.find(counted, 'e', 1, true) and (callback or not fields[6]) then
    flowExpire(tonumber(fields[3]) or 86400000)
  end
  return done
end
local changed = 0
for i = 2, #ARGV do
  local known = redis.call('HGET', KEYS[2], ARGV[i])
  local was, seq = string.match(known or '', '^(%a)/(%d+)$')
  if ARGV[1] == 'released' and was == 'q' then
    redis.call('HSET', KEYS[2], ARGV[i], 'r/' .. seq)
    changed = changed + 1
  elseif ARGV[1] == 'gone' and (was == 'q' or was == 'r') then
    redis.call('HSET', KEYS[2], ARGV[i], 'c/' .. seq)
    redis.call('HSET', KEYS[5], ARGV[i], cjson.encode({ message = 'stopped before it was enqueued' }))
    changed = changed + 1
  end
end
return changed
