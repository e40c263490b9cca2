import type { WritePacket } from '@nestjs/microservices';
import { ClosedError } from '../core/model/errors.js';
import type { ProducerRuntime } from '../core/producer/producer-runtime.js';
import { newTaskId } from '../core/producer/producer.js';
import { sendItem } from './redis-task-record.builder.js';

/**
 * A `send()` through the client's reply inbox (subscribe, enqueue, duplicates, progress, the reply or its
 * timeout are the inbox's); `runtime` undefined: the client closed.
 */
export function publishSend(
  runtime: ProducerRuntime | undefined,
  queue: string,
  data: unknown,
  clientId: string,
  callback: (packet: WritePacket) => void,
  deadline: number,
): () => void {
  if (!runtime) {
    callback({ err: new ClosedError('RedisTaskClient'), isDisposed: true });
    return () => undefined;
  }
  const inbox = runtime.inbox;
  const { item, onProgress } = sendItem(data, clientId, inbox.channel, newTaskId);
  return inbox.send(
    queue,
    item,
    deadline,
    (answer) =>
      callback(
        'err' in answer ? { err: answer.err, isDisposed: true } : { response: answer.response, isDisposed: true },
      ),
    onProgress,
  );
}
