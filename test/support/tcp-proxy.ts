/**
 * A TCP proxy in front of a real Redis that can black-hole the connections open through it: data stops
 * flowing both ways while the sockets stay open, as with a half-open connection after a network
 * partition or a crashed middlebox. Connections opened afterwards work normally.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';

export interface TcpProxy {
  readonly port: number;
  readonly url: string;
  /**
   * Stops forwarding on every connection open now (with `marker`, on those whose client sent it, such
   * as a connection name: the others go on); neither side is told.
   */
  freeze(marker?: string): void;
  /**
   * Cuts every connection open now, and from then on accepts each new one but forwards nothing and
   * closes it after `holdMs`: a server that is gone, each reconnection attempt failing within `holdMs`.
   */
  dropAfter(holdMs: number): void;
  /**
   * The next time a client sends a command containing `marker`, the connection is cut right after Redis
   * answers it, the answer never forwarded: Redis ran the command, the client never heard (as when a
   * connection drops between the two). Resolves once it happened.
   */
  loseReplyTo(marker: string): Promise<void>;
  /** Ends `dropAfter`: connections opened from now on are forwarded again (Redis is back). */
  restore(): void;
  close(): Promise<void>;
}

export async function startProxy(targetPort: number): Promise<TcpProxy> {
  const pairs = new Set<[Socket, Socket]>();
  /** The first bytes each client sent (its handshake: CLIENT SETNAME and the like), for freeze(marker). */
  const opening = new WeakMap<[Socket, Socket], string>();
  const held = new Set<Socket>();
  let dropAfterMs: number | undefined;
  let losing: { marker: string; done: () => void } | undefined;
  const server: Server = createServer((client) => {
    if (dropAfterMs !== undefined) {
      held.add(client);
      client.on('error', () => undefined).on('close', () => held.delete(client));
      setTimeout(() => client.destroy(), dropAfterMs);
      return;
    }
    const upstream = connect(targetPort, '127.0.0.1');
    const pair: [Socket, Socket] = [client, upstream];
    pairs.add(pair);
    let armed = false;
    client.on('data', (chunk: Buffer) => {
      const sent = opening.get(pair) ?? '';
      if (sent.length < 4_096) opening.set(pair, sent + chunk.toString('latin1'));
      if (losing && chunk.includes(losing.marker)) armed = true;
      upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      if (armed && losing) {
        const { done } = losing;
        losing = undefined;
        drop();
        done();
        return;
      }
      client.write(chunk);
    });
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
    freeze(marker) {
      for (const pair of pairs) {
        if (marker !== undefined && !(opening.get(pair) ?? '').includes(marker)) continue;
        const [client, upstream] = pair;
        client.removeAllListeners('data');
        upstream.removeAllListeners('data');
        client.pause();
        upstream.pause();
        frozen.push(pair);
        pairs.delete(pair);
      }
    },
    dropAfter(holdMs) {
      dropAfterMs = holdMs;
      for (const [client, upstream] of pairs) {
        client.destroy();
        upstream.destroy();
      }
    },
    restore() {
      dropAfterMs = undefined;
    },
    loseReplyTo(marker) {
      return new Promise<void>((resolve) => {
        losing = { marker, done: resolve };
      });
    },
    async close() {
      for (const [client, upstream] of [...pairs, ...frozen]) {
        client.destroy();
        upstream.destroy();
      }
      for (const client of held) client.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
