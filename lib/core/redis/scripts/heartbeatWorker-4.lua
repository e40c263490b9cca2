-- heartbeatWorker-4.lua
-- Purpose: renew a worker's lease on a queue (register it if new) with the Redis server's clock, and
--   reconcile what the worker believes it runs with what its processing hash holds.
-- Includes: guard
-- KEYS[1]: workers (sorted set: worker id -> lease expiry, Redis time in milliseconds)
-- KEYS[2]: processing hash of the worker (hash: fencing token -> encoded entry)
-- KEYS[3]: heartbeats (hash: worker id -> time of its last heartbeat, Redis time in milliseconds)
-- KEYS[4]: faults (hash: broken data found and what was done; see guard)
-- ARGV[1]: worker id; ARGV[2]: lease length in milliseconds (expiry = now + lease), or `<idle>/<held>`: the
--   idle length when the processing hash holds no task, else the held one (a claim may have taken tasks
--   since the caller decided it held none: a long idle lease is never written over a task)
-- ARGV[3..]: fencing tokens of the tasks the worker is running now
-- Returns: array { now, lost, orphaned } where lost lists the given tokens the hash no longer holds
--   (their lease was lost: recovered by a reaper) and orphaned lists tokens the hash holds that were
--   not given (claimed, but the worker never saw the claim's reply)
-- Side effects: ZADD of the worker's lease expiry; HSET of its heartbeat time; a key of the wrong type
--   renamed aside and recorded in faults (see guard's healingCall) and the command repeated.
-- A key of another type holds nothing of ours (no lease, no task): it is set aside and recorded, so a
-- stray key never keeps workers from registering. Checked by the command that finds it (healingCall): a
-- beat, sent for every shard of every worker, pays no TYPE while the keys are sound.
local ms = redisMs()
local held = healingCall(KEYS[4], 'hash', 'HKEYS', KEYS[2])
local leaseMs = ARGV[2]
local idle, holding = string.match(leaseMs, '^(%d+)/(%d+)$')
if idle then
  leaseMs = #held == 0 and idle or holding
end
healingCall(KEYS[4], 'zset', 'ZADD', KEYS[1], ms + tonumber(leaseMs), ARGV[1])
healingCall(KEYS[4], 'hash', 'HSET', KEYS[3], ARGV[1], ms)
local running = {}
local lost = {}
if #ARGV >= 3 then
  local holds = {}
  for _, token in ipairs(held) do
    holds[token] = true
  end
  for i = 3, #ARGV do
    running[ARGV[i]] = true
    if not holds[ARGV[i]] then
      lost[#lost + 1] = ARGV[i]
    end
  end
end
local orphaned = {}
for _, token in ipairs(held) do
  if not running[token] then
    orphaned[#orphaned + 1] = token
  end
end
return { ms, lost, orphaned }
