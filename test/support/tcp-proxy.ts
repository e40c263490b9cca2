/**
 * A TCP proxy in front of a real Redis that can black-hole the connections open through it: data stops
 * flowing both ways while the sockets stay open, as with a half-open connection after a network
 * partition or a crashed middlebox. Connections opened afterwards work normally.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';

export interface TcpProxy {
  readonly port: number;
  readonly url: string;
  /** Stops forwarding on every connection open now; neither side is told. */
  freeze(): void;
  close(): Promise<void>;
}

export async function startProxy(targetPort: number): Promise<TcpProxy> {
  const pairs = new Set<[Socket, Socket]>();
  const server: Server = createServer((client) => {
    const upstream = connect(targetPort, '127.0.0.1');
    const pair: [Socket, Socket] = [client, upstream];
    pairs.add(pair);
    client.pipe(upstream);
    upstream.pipe(client);
    const drop = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  const frozen: [Socket, Socket][] = [];
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    freeze() {
      for (const pair of pairs) {
        const [client, upstream] = pair;
        client.unpipe(upstream);
        upstream.unpipe(client);
        client.pause();
        upstream.pause();
        frozen.push(pair);
        pairs.delete(pair);
      }
    },
    async close() {
      for (const [client, upstream] of [...pairs, ...frozen]) {
        client.destroy();
        upstream.destroy();
      }
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
