-- include/guard.lua — shared by the scripts whose header says "Includes: guard".
-- Needs: clock
-- Redis does not roll back a script that fails midway, so a script must never fail after its first
-- write. These helpers let it check or heal, before it writes, what a stray command could have broken.
-- Builds keys: a quarantined key is renamed to `<key>:quarantined:<n>` (same hash tag, so same slot).
--
-- expectTypes(key1, type1, key2, type2, ...)
--   Raises WRONGTYPE, naming the key, when a key holds another type than the script writes to it
--   (an absent key is fine). Called before the first write: a broken queue-level key stops the script
--   with nothing changed, never halfway.
local function expectTypes(...)
  local args = { ... }
  for i = 1, #args, 2 do
    local kind = redis.call('TYPE', args[i])['ok']
    if kind ~= 'none' and kind ~= args[i + 1] then
      error({ err = 'WRONGTYPE nestjs-redis-tasks: key ' .. args[i] .. ' holds a ' .. kind .. ', not a ' .. args[i + 1] ..
        '; nothing was changed (delete or rename the key to let the queue go on)' })
    end
  end
end

-- checkedCall(kind, command, key, ...)
--   A script's first command on `key` (a read, before any write): a key of another type than `kind`
--   fails the script naming the key (nothing was changed yet), instead of Redis's bare WRONGTYPE.
--   Costs nothing more than the command when the key is sound.
local function checkedCall(kind, command, key, ...)
  local reply = redis.pcall(command, key, ...)
  if type(reply) == 'table' and reply.err then
    if string.sub(reply.err, 1, 9) == 'WRONGTYPE' then
      expectTypes(key, kind)
    end
    error(reply)
  end
  return reply
end

-- recordFault(faults, subject, what)
--   Notes a problem found in Redis data and what was done about it, for the admin API, the CLI and the
--   health check (hash: subject -> "<Redis time ms> <what>").
local function recordFault(faults, subject, what)
  redis.call('HSET', faults, subject, tostring(redisMs()) .. ' ' .. what)
end

-- quarantineKey(faults, key, kind)
--   A client's key holds another type than `kind` (a stray SET, say): it is renamed out of the way,
--   kept for inspection, and recorded, so the client's new tasks and every other client go on.
local function quarantineKey(faults, key, kind)
  local n = redis.call('HINCRBY', faults, '#quarantined', 1)
  local moved = key .. ':quarantined:' .. n
  local found = redis.call('TYPE', key)['ok']
  redis.call('RENAME', key, moved)
  recordFault(faults, key, 'held a ' .. found .. ', not a ' .. kind .. '; renamed to ' .. moved)
end

-- usableKey(faults, key, kind): quarantines `key` when it holds another type than `kind`.
local function usableKey(faults, key, kind)
  local found = redis.call('TYPE', key)['ok']
  if found ~= 'none' and found ~= kind then
    quarantineKey(faults, key, kind)
  end
end

-- numberOr(faults, subject, value, default)
--   A number read from Redis (a weight, a rate, a count): `default` when absent; when present but not
--   a number, also `default`, and the bad value is recorded instead of failing the script.
local function numberOr(faults, subject, value, default)
  if not value then
    return default
  end
  local number = tonumber(value)
  if not number or number ~= number or number == math.huge or number == -math.huge then
    recordFault(faults, subject, 'is "' .. string.sub(tostring(value), 1, 40) .. '", not a number; used ' .. tostring(default))
    return default
  end
  return number
end

-- countOutcome(counters, field, n): adds to an outcome counter; a broken counters key never stops a
--   settle (the counters are statistics; the admin API reports the broken key).
local function countOutcome(counters, field, n)
  redis.pcall('HINCRBY', counters, field, n)
end

-- healingCall(faults, kind, command, key, ...)
--   A command on a client's own key: a key of the wrong type is quarantined and the command repeated on
--   the now absent key (a command refused for a wrong type changed nothing), so one broken client never
--   stops the others. Other errors are raised.
local function healingCall(faults, kind, command, key, ...)
  local reply = redis.pcall(command, key, ...)
  if type(reply) == 'table' and reply.err then
    if string.sub(reply.err, 1, 9) ~= 'WRONGTYPE' then
      error(reply)
    end
    quarantineKey(faults, key, kind)
    reply = redis.call(command, key, ...)
  end
  return reply
end

-- healingIncr(faults, key, by, reset): INCRBY of a counter; one that is not an integer is reset to
--   `reset` (recorded) instead of failing.
local function healingIncr(faults, key, by, reset)
  local reply = redis.pcall('INCRBY', key, by)
  if type(reply) == 'table' and reply.err then
    recordFault(faults, key, 'was not an integer counter; reset to ' .. reset)
    redis.call('DEL', key)
    redis.call('SET', key, reset)
    return reset
  end
  return reply
end

-- ringBell(bell): puts the one token on a shard's bell list (`<base>:bell`) unless it holds one: the
--   waiters blocked on the bell (one BLPOP per idle worker process) are woken one at a time, so a task
--   wakes one process, not every idle one. A bell of another type is left alone (its waiters claim at
--   their backstop).
local function ringBell(bell)
  if redis.pcall('LLEN', bell) == 0 then
    redis.call('RPUSH', bell, '1')
  end
end

-- wakeWorkers(ring, length, pushed): after `pushed` clients went onto a ring that is now `length` long:
--   when it was empty before, the workers of its queue that wait for work are told: one process blocked
--   on the shard's bell (`<base>:bell`, see ringBell) and the loops waiting for the pub/sub channel
--   `<base>:wake` (a ring is `<base>:ring`). A ring that was not empty needs neither: its workers are
--   claiming (the claim that empties it tells them to wait, and one that leaves work rings the bell for
--   another process). Every push onto a ring goes through here (test/lua/wake.spec.ts checks each script).
local function wakeWorkers(ring, length, pushed)
  if length == pushed then
    ringBell((string.gsub(ring, 'ring$', 'bell')))
    redis.call('PUBLISH', (string.gsub(ring, 'ring$', 'wake')), '')
  end
end

-- A prioritized count that had to be reset: large, so claims keep looking at priority sets.
local UNKNOWN_COUNT = 1000000000
