-- claimTasks-5.lua
-- Purpose: move up to N tasks from the head of one client's pending list into the claiming worker's
--   processing hash, each under a fresh fencing token. Called after BLMOVE rotated that client to the
--   ring's tail; the claim itself is atomic, so a task is always in exactly one list or hash.
-- KEYS[1]: ring (list of client ids with pending tasks)
-- KEYS[2]: pending list of the client (list of encoded entries)
-- KEYS[3]: processing hash of the worker (hash: fencing token -> encoded entry)
-- KEYS[4]: sequence (string counter of fencing tokens)
-- KEYS[5]: workers (sorted set: worker id -> lease expiry)
-- ARGV[1]: client id; ARGV[2]: maximum number of tasks to claim; ARGV[3]: worker id
-- Returns: -1 when the worker is not registered (it must register, then claim again);
--   otherwise a flat array token1, entry1, token2, entry2, ... (empty when the client had nothing)
-- Side effects: LPOP from the pending list, HSET into the processing hash, INCRBY of the sequence;
--   the client leaves the ring when its list becomes empty.
if not redis.call('ZSCORE', KEYS[5], ARGV[3]) then
  return -1
end
local wanted = tonumber(ARGV[2])
local entries = redis.call('LPOP', KEYS[2], wanted)
if not entries then
  redis.call('LREM', KEYS[1], -1, ARGV[1])
  return {}
end
local count = #entries
if count < wanted or redis.call('LLEN', KEYS[2]) == 0 then
  redis.call('LREM', KEYS[1], -1, ARGV[1])
end
local last = redis.call('INCRBY', KEYS[4], count)
local reply = {}
local fields = {}
for i = 1, count do
  local token = tostring(last - count + i)
  reply[2 * i - 1] = token
  reply[2 * i] = entries[i]
  fields[2 * i - 1] = token
  fields[2 * i] = entries[i]
end
redis.call('HSET', KEYS[3], unpack(fields))
return reply
