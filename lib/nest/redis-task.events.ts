/** Connection states reported on `RedisTaskTransport.status` and `RedisTaskClient.status`. */
export enum RedisTaskStatus {
  CONNECTED = 'connected',
  RECONNECTING = 'reconnecting',
  DISCONNECTED = 'disconnected',
}

/** Events the transport and the client report through `on()`. */
export type RedisTaskEvents = {
  error: (error: Error) => void;
  status: (status: RedisTaskStatus) => void;
};
