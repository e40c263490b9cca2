-- claimSchedules-5.lua
-- Purpose: take the schedules whose next tick has come, by Redis time, for one process to fire: each one
--   taken leaves the due set's head for `lease` ms (its entry is scored at the lease's end) and its tick is
--   kept in the firing hash, so processes checking at once take disjoint slices, and one that dies while
--   firing leaves its slice to be taken again when the lease ends (the tick kept: it is fired from where it
--   was). The fire and its advance are made once by enqueueTasks' call record and advanceSchedule.
--   Also records the run of takes under way (KEYS[5]): a tick due within the grace before a take of a run that
--   has gone on since (no gap between takes longer than the grace) waited for busy processes and is fired
--   late; a tick that passed while no process took any work was missed (the schedule's `missed` policy).
-- Includes: guard
-- KEYS[1]: schedules (hash: schedule id -> the stored schedule)
-- KEYS[2]: due (sorted set: schedule id -> its next tick, or the end of a firer's lease, Redis time in ms)
-- KEYS[3]: state (hash: schedule id -> what its last ticks did, JSON)
-- KEYS[4]: firing (hash: schedule id -> `<tick>|<lease end>` while a process fires it)
-- KEYS[5]: checked (string: `<run start>|<last take>`, Redis ms of the takes that found due work; expires
--   after ARGV[3] ms)
-- ARGV[1]: at most this many schedules; ARGV[2]: the lease (ms); ARGV[3]: how long KEYS[5] is kept (ms);
--   ARGV[4]: the grace (ms): a longer gap between two takes ends a run
-- Returns: array { now, later, run start, last take, id, tick, stored schedule (or false), state (or false),
--   lease end, id, ... }: Redis time in ms, the earliest entry after now (0: none), the start of the run of
--   takes this one belongs to and the previous take's time (both 0 when this take starts a run), then per
--   schedule taken five fields (the lease end is its token for advanceSchedule).
-- Side effects: ZADD of each taken schedule's due entry (the lease's end); HSET of its firing entry; SET
--   of KEYS[5] (PX ARGV[3]) when any was taken.
local nowMs = redisMs()
local later = checkedCall('zset', 'ZRANGEBYSCORE', KEYS[2], '(' .. nowMs, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', nowMs, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
if #due == 0 then
  -- Nothing due (an idle process's check): read only, three commands.
  return { nowMs, later[2] and tonumber(later[2]) or 0, 0, 0 }
end
expectTypes(KEYS[1], 'hash', KEYS[3], 'hash', KEYS[4], 'hash', KEYS[5], 'string')
local runStart, lastTake = string.match(redis.call('GET', KEYS[5]) or '', '^(%d+)|(%d+)$')
runStart, lastTake = tonumber(runStart) or 0, tonumber(lastTake) or 0
if nowMs - lastTake > tonumber(ARGV[4]) then
  runStart, lastTake = 0, 0
end
local reply = { nowMs, later[2] and tonumber(later[2]) or 0, runStart, lastTake }
local leaseEnd = nowMs + tonumber(ARGV[2])
for i = 1, #due, 2 do
  local id = due[i]
  -- Taken before by a process that did not finish (its entry still scored at that take's lease end, not
  -- placed anew by an operator's resume or change): the tick is the one that take had.
  local tick = tonumber(due[i + 1])
  local firing = redis.call('HGET', KEYS[4], id)
  if firing then
    local took, ends = string.match(firing, '^(%d+)|(%d+)$')
    if ends and tonumber(ends) == tick then
      tick = tonumber(took)
    end
  end
  redis.call('ZADD', KEYS[2], leaseEnd, id)
  redis.call('HSET', KEYS[4], id, string.format('%d', tick) .. '|' .. string.format('%d', leaseEnd))
  reply[#reply + 1] = id
  reply[#reply + 1] = tick
  reply[#reply + 1] = redis.call('HGET', KEYS[1], id)
  reply[#reply + 1] = redis.call('HGET', KEYS[3], id)
  reply[#reply + 1] = leaseEnd
end
redis.call('SET', KEYS[5], string.format('%d', runStart > 0 and runStart or nowMs) .. '|' .. string.format('%d', nowMs),
  'PX', tonumber(ARGV[3]))
return reply
