/**
 * Redis MONITOR on a plain socket, for tests that must see which connection ran a command. ioredis's own
 * `monitor()` can throw "Command queue state error" from its reply handler when a monitored line arrives
 * while it is still switching modes, leaving a connection that keeps Jest alive.
 */
import { connect, type Socket } from 'node:net';

/** One command as MONITOR printed it: the address it came from ('lua' inside a script) and its arguments. */
export interface MonitoredCommand {
  readonly source: string;
  readonly args: string[];
}

export interface Monitor {
  /** Stops monitoring and closes the socket. */
  stop(): void;
}

/** Starts MONITOR on `url`; resolves once Redis confirmed it, so every command run afterwards is seen. */
export async function monitor(url: string, onCommand: (command: MonitoredCommand) => void): Promise<Monitor> {
  const { hostname, port, username, password } = new URL(url);
  const socket: Socket = connect(Number(port || 6379), hostname || '127.0.0.1');
  socket.setEncoding('latin1'); // bytes as they came; arguments are compared with ASCII names
  let buffered = '';
  let confirmed: (() => void) | undefined;
  let failed: ((error: Error) => void) | undefined;
  const ready = new Promise<void>((resolve, reject) => {
    confirmed = resolve;
    failed = reject;
  });
  let okays = password ? 2 : 1;
  socket.on('error', (error) => failed?.(error));
  socket.on('data', (chunk: string) => {
    buffered += chunk;
    let end: number;
    while ((end = buffered.indexOf('\r\n')) >= 0) {
      const line = buffered.slice(0, end);
      buffered = buffered.slice(end + 2);
      if (line.startsWith('-')) failed?.(new Error(`MONITOR refused: ${line.slice(1)}`));
      else if (line === '+OK' && okays > 0 && --okays === 0) confirmed?.();
      else if (line.startsWith('+') && okays === 0) {
        const parsed = parseLine(line.slice(1));
        if (parsed) onCommand(parsed);
      }
    }
  });
  if (password)
    socket.write(
      command(
        username
          ? ['AUTH', decodeURIComponent(username), decodeURIComponent(password)]
          : ['AUTH', decodeURIComponent(password)],
      ),
    );
  socket.write(command(['MONITOR']));
  await ready;
  return { stop: () => socket.destroy() };
}

function command(args: string[]): string {
  return `*${args.length}\r\n${args.map((arg) => `$${Buffer.byteLength(arg)}\r\n${arg}\r\n`).join('')}`;
}

/** `1700000000.000000 [0 127.0.0.1:5000] "evalsha" "abc" "1"`: the address, and the quoted arguments unescaped. */
function parseLine(line: string): MonitoredCommand | undefined {
  const header = /^\S+ \[\d+ ([^\]]+)\] /.exec(line);
  if (!header) return undefined;
  const args: string[] = [];
  let i = header[0].length;
  while (i < line.length) {
    if (line[i] !== '"') {
      i++;
      continue;
    }
    let arg = '';
    i++;
    while (i < line.length && line[i] !== '"') {
      if (line[i] === '\\' && i + 1 < line.length) {
        const next = line[i + 1];
        if (next === 'x') {
          arg += String.fromCharCode(parseInt(line.slice(i + 2, i + 4), 16));
          i += 4;
          continue;
        }
        arg += ({ n: '\n', r: '\r', t: '\t', a: '\x07', b: '\b' } as Record<string, string>)[next] ?? next;
        i += 2;
        continue;
      }
      arg += line[i++];
    }
    args.push(arg);
    i++; // the closing quote
  }
  return { source: header[1].startsWith('lua') ? 'lua' : header[1], args };
}
