-- include/pushTask.lua — shared by the scripts whose header says "Includes: pushTask".
-- pushTask(list, prio, ring, sequence, prioritized, clientId, entry, priority, atHead)
--   Puts an encoded entry into its client's pending tasks: priority 0 in the client's list, a higher
--   priority in the client's priority set (score -priority; the member is a 15-digit sequence number
--   followed by the entry, so equal priorities keep their order). atHead puts it before the others of
--   its priority (a task returned by a worker). The client joins the ring (at its head when atHead)
--   when this is its only pending task, so the ring holds a client exactly while it has pending tasks.
--   `prioritized` counts the queue's prioritized pending tasks (claims skip priority sets while it is 0).
local function pushTask(list, prio, ring, sequence, prioritized, clientId, entry, priority, atHead)
  local size
  if priority > 0 then
    local seq = 0
    if not atHead then
      seq = redis.call('INCR', sequence)
    end
    redis.call('ZADD', prio, -priority, string.format('%015d', seq) .. entry)
    redis.call('INCR', prioritized)
    size = redis.call('ZCARD', prio)
    if size == 1 then
      size = size + redis.call('LLEN', list)
    end
  else
    if atHead then
      size = redis.call('LPUSH', list, entry)
    else
      size = redis.call('RPUSH', list, entry)
    end
    if size == 1 then
      size = size + redis.call('ZCARD', prio)
    end
  end
  if size == 1 then
    if atHead then
      redis.call('LPUSH', ring, clientId)
    else
      redis.call('RPUSH', ring, clientId)
    end
  end
end
