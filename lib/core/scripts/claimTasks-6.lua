-- claimTasks-6.lua
-- Purpose: move up to N tasks of one client (highest priority first, then oldest first) into the
--   claiming worker's processing hash, each under a fresh fencing token. Called after BLMOVE rotated
--   that client to the ring's tail; the claim itself is atomic, so a task is always in exactly one
--   list, set or hash.
-- KEYS[1]: ring (list of client ids with pending tasks)
-- KEYS[2]: pending list of the client (list of encoded entries, priority 0)
-- KEYS[3]: priority set of the client (sorted set: sequence-prefixed entry -> -priority)
-- KEYS[4]: processing hash of the worker (hash: fencing token -> encoded entry)
-- KEYS[5]: sequence (string counter of fencing tokens)
-- KEYS[6]: workers (sorted set: worker id -> lease expiry)
-- ARGV[1]: client id; ARGV[2]: maximum number of tasks to claim; ARGV[3]: worker id
-- Returns: -1 when the worker is not registered (it must register, then claim again);
--   otherwise a flat array token1, entry1, token2, entry2, ... (empty when the client had nothing)
-- Side effects: ZPOPMIN from the priority set, LPOP from the pending list, HSET into the processing
--   hash, INCRBY of the sequence; the client leaves the ring when it has no pending task left.
if not redis.call('ZSCORE', KEYS[6], ARGV[3]) then
  return -1
end
local wanted = tonumber(ARGV[2])
local entries = {}
local count = 0
local prioritized = redis.call('ZPOPMIN', KEYS[3], wanted)
for i = 1, #prioritized, 2 do
  count = count + 1
  entries[count] = string.sub(prioritized[i], 16)
end
if count < wanted then
  local plain = redis.call('LPOP', KEYS[2], wanted - count)
  if plain then
    for i = 1, #plain do
      count = count + 1
      entries[count] = plain[i]
    end
  end
end
if count < wanted or (redis.call('LLEN', KEYS[2]) == 0 and redis.call('ZCARD', KEYS[3]) == 0) then
  redis.call('LREM', KEYS[1], -1, ARGV[1])
end
if count == 0 then
  return {}
end
local last = redis.call('INCRBY', KEYS[5], count)
local reply = {}
local fields = {}
for i = 1, count do
  local token = tostring(last - count + i)
  reply[2 * i - 1] = token
  reply[2 * i] = entries[i]
  fields[2 * i - 1] = token
  fields[2 * i] = entries[i]
end
redis.call('HSET', KEYS[4], unpack(fields))
return reply
