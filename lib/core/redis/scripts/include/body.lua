-- include/body.lua — shared by the scripts whose header says "Includes: body" (and by follow.lua).
-- Out-of-line payloads: a payload larger than the producer's `outOfLineBytes` does not travel through the
-- scripts. The producer stores it with a plain SET under `<root>:body:<body id>` (QueueKeys.body; a string
-- with a TTL, the bound of a body whose enqueue never ran), then enqueues an entry that names it: the entry's
-- envelope has no `payload` and ends with `,"body":"<body id>"}` (its last field, written by the producer
-- alone; body ids are [A-Za-z0-9_-]). The enqueue keeps the body of each task it writes (PERSIST; a copy per
-- consumer group's base, COPY, so each group's copy has its own life) and deletes the body of a task it
-- refuses; a worker reads it with a plain GET after the claim; every move that ends the task (completed,
-- dead: the dead-letter record carries the payload the worker read; cancelled, dropped, superseded) deletes
-- it. A body never crosses into Lua: 16 KB that crosses costs Redis ~20 µs each way, a plain SET or GET ~10.
-- bodyOf(entry)
--   The body id an encoded entry names, or nil (most entries: their last two characters are not `"}`, or the
--   field is not there). Reads the tail alone: the cost does not grow with the entry.
-- bodyEnd(base, entry)
--   The task of `entry` ended: its body in `base` is deleted (DEL; nothing when it has none).
-- bodyKeep(root, bases, id)
--   The enqueue wrote the task whose body is `id` (stored by the producer under the root): each base that
--   is not the root gets its copy (COPY), and the root's is kept (PERSIST) when the root is one of the
--   bases, else deleted. The caller checked first that the body is there (an enqueue run after the body's TTL
--   ran out writes nothing of its task).
local function bodyOf(entry)
  -- Most entries end with `}` or `]` then `}` (an object or array payload): one byte tells, no substring is made.
  if string.byte(entry, -1) ~= 125 or string.byte(entry, -2) ~= 34 then
    return nil
  end
  return string.match(string.sub(entry, -80), ',"body":"([%w_%-]+)"}$')
end

local function bodyEnd(base, entry)
  local id = entry and bodyOf(entry)
  if id then
    redis.call('DEL', base .. ':body:' .. id)
  end
end

local function bodyKeep(root, bases, id)
  local source = root .. ':body:' .. id
  local kept = false
  for _, base in ipairs(bases) do
    if base == root then
      kept = true
    else
      redis.call('COPY', source, base .. ':body:' .. id, 'REPLACE')
      redis.call('PERSIST', base .. ':body:' .. id)
    end
  end
  if kept then
    redis.call('PERSIST', source)
  else
    redis.call('DEL', source)
  end
end
