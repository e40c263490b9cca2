-- include/pushTask.lua — shared by the scripts whose header says "Includes: pushTask".
-- Needs: guard
-- pushTask(list, prio, ring, sequence, prioritized, clientId, entry, priority, atHead, faults, pendingCount)
--   Puts an encoded entry into its client's pending tasks: priority 0 in the client's list, a higher
--   priority in the client's priority set (score -priority; the member is a 15-digit sequence number
--   followed by the entry, so equal priorities keep their order). atHead puts it before the others of
--   its priority (a task returned by a worker). The client joins the ring (at its head when atHead)
--   when this is its only pending task, so the ring holds a client exactly while it has pending tasks.
--   `prioritized` counts the queue's prioritized pending tasks (claims skip priority sets while it is 0);
--   `pendingCount` counts all of the shard's pending tasks (read by the dashboard and stats in O(1); the
--   claim takes off what it holds, and resets it to 0 when it finds no client waiting).
--   Never fails halfway: a client key or ring of the wrong type (overwritten by something else, so what
--   it held is gone already) is quarantined and the push repeated (a failed push changes nothing), and a
--   counter that is not an integer is reset and recorded in `faults`. Checking costs nothing until a
--   command fails, so the hot path runs no extra command.
--   enqueueTasks inlines the tail push of a task without priority (its hottest path), in its fast path
--   and in its general path: a change here is made in both.
-- groupBases(root, groups)
--   The bases a task of the shard `root` is written to, one per consumer group in `groups` (the members of
--   `<root>:groups`): `default`'s is the root itself, another's `<root>:g:<group>`; with none registered yet,
--   the root (the tasks wait in its keys).
local function pushTask(list, prio, ring, sequence, prioritized, clientId, entry, priority, atHead, faults, pendingCount)
  local size
  if priority > 0 then
    local seq = 0
    if not atHead then
      seq = healingIncr(faults, sequence, 1, 1)
    end
    healingCall(faults, 'zset', 'ZADD', prio, -priority, string.format('%015d', seq) .. entry)
    healingIncr(faults, prioritized, 1, UNKNOWN_COUNT)
    size = redis.call('ZCARD', prio)
    if size == 1 then
      size = size + healingCall(faults, 'list', 'LLEN', list)
    end
  else
    if atHead then
      size = healingCall(faults, 'list', 'LPUSH', list, entry)
    else
      size = healingCall(faults, 'list', 'RPUSH', list, entry)
    end
    if size == 1 then
      size = size + healingCall(faults, 'zset', 'ZCARD', prio)
    end
  end
  healingIncr(faults, pendingCount, 1, 1)
  if size == 1 then
    if atHead then
      wakeWorkers(ring, healingCall(faults, 'list', 'LPUSH', ring, clientId), 1)
    else
      wakeWorkers(ring, healingCall(faults, 'list', 'RPUSH', ring, clientId), 1)
    end
  end
end

local function groupBases(root, groups)
  local bases = {}
  for _, group in ipairs(groups) do
    bases[#bases + 1] = group == 'default' and root or (root .. ':g:' .. group)
  end
  if #bases == 0 then
    bases[1] = root
  end
  return bases
end
