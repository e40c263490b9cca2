-- changeSchedule-4.lua
-- Purpose: store, pause, resume, orphan or remove a recurring schedule, atomically with its entry in the
--   due set. A stored schedule is one string, `<version>|<flags>|<anchor>|<source>|<spec JSON>`: flags
--   `p` (paused by an operator) and `o` (orphaned: its decorator left the code); the anchor is the Redis
--   time (ms) the spec was stored at, from which an `everyMs` rhythm counts. The spec JSON is the caller's
--   canonical form, so N replicas storing the same spec at once compare equal: the first stores it, the
--   others change nothing (one schedule, one rhythm).
-- Includes: guard
-- KEYS[1]: schedules (hash: schedule id -> the stored schedule)
-- KEYS[2]: due (sorted set: schedule id -> its next tick, Redis time in ms; absent while paused or ended)
-- KEYS[3]: state (hash: schedule id -> what its last ticks did, JSON)
-- KEYS[4]: firing (hash: schedule id -> `<tick>|<lease end>` while a process fires it; see claimSchedules)
-- ARGV[1]: the operation: 'upsert', 'pause', 'resume', 'orphan' or 'remove'
-- ARGV[2]: the schedule id
-- ARGV[3..] for 'upsert': spec JSON, source ('api' or 'code'), anchor (Redis time in ms), next tick
--   computed from that anchor (ms; 0: none). For 'resume': the version the caller read, and the next tick
--   computed from now (ms; 0: none).
-- Returns: 'upsert': 'created', 'updated' (a new version: it takes effect from the next tick) or
--   'unchanged'; 'resume': 1, 0 (no such schedule) or -1 (its spec changed since the caller read it);
--   the others: 1, or 0 when there is no such schedule.
-- Side effects: SET/DEL of the schedule's field in schedules (and in state and firing on 'remove');
--   ZADD/ZREM of its due entry.
expectTypes(KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'hash', KEYS[4], 'hash')
local op, id = ARGV[1], ARGV[2]
local stored = redis.call('HGET', KEYS[1], id)
local version, flags, anchor, source, spec
if stored then
  version, flags, anchor, source, spec = string.match(stored, '^(%d+)|(%a*)|(%d+)|(%a+)|(.*)$')
  if not version then
    -- Not a schedule this library wrote: replaced (upsert) or removed, never misread.
    stored = nil
  end
end
local function save(newVersion, newFlags, newAnchor, newSource, newSpec)
  redis.call('HSET', KEYS[1], id, newVersion .. '|' .. newFlags .. '|' .. newAnchor .. '|' .. newSource .. '|' .. newSpec)
end
if op == 'upsert' then
  local newSpec, newSource, newAnchor, next = ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])
  if stored and spec == newSpec and source == newSource then
    if string.find(flags, 'o', 1, true) then
      -- Back in the code: no longer orphaned (still paused if an operator paused it).
      local kept = string.gsub(flags, 'o', '')
      save(version, kept, anchor, source, spec)
      if kept == '' and redis.call('ZSCORE', KEYS[2], id) == false and next > 0 then
        redis.call('ZADD', KEYS[2], next, id)
      end
      return 'updated'
    end
    return 'unchanged'
  end
  local paused = stored and string.find(flags, 'p', 1, true)
  save(stored and (tonumber(version) + 1) or 1, paused and 'p' or '', newAnchor, newSource, newSpec)
  if paused or next <= 0 then
    redis.call('ZREM', KEYS[2], id)
  else
    redis.call('ZADD', KEYS[2], next, id)
  end
  return stored and 'updated' or 'created'
end
if not stored then
  if op == 'remove' then
    redis.call('HDEL', KEYS[1], id)
    redis.call('HDEL', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
    redis.call('ZREM', KEYS[2], id)
  end
  return 0
end
if op == 'pause' or op == 'orphan' then
  local flag = op == 'pause' and 'p' or 'o'
  if not string.find(flags, flag, 1, true) then
    save(version, flags .. flag, anchor, source, spec)
  end
  redis.call('ZREM', KEYS[2], id)
  return 1
end
if op == 'resume' then
  if version ~= ARGV[3] then
    return -1
  end
  save(version, '', anchor, source, spec)
  local next = tonumber(ARGV[4])
  if next > 0 then
    redis.call('ZADD', KEYS[2], next, id)
  else
    redis.call('ZREM', KEYS[2], id)
  end
  return 1
end
if op == 'remove' then
  redis.call('HDEL', KEYS[1], id)
  redis.call('HDEL', KEYS[3], id)
  redis.call('HDEL', KEYS[4], id)
  redis.call('ZREM', KEYS[2], id)
  return 1
end
error({ err = 'ERR nestjs-redis-tasks: changeSchedule has no such operation (upsert, pause, resume, orphan, remove)' })
