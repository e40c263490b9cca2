// Types of redis-server.mjs for the TypeScript tests that import it.
export interface RedisServer {
  url: string;
  port: number;
  pid: number;
  /** SIGTERM, and wait for the exit. */
  stop(): Promise<void>;
  /** SIGKILL (a crash), and wait for the exit. */
  kill(): Promise<void>;
}
export interface FoundRedis {
  url: string;
  version: string;
  source: string;
  stop(): Promise<void>;
}
export function probe(url: string, timeoutMs?: number): Promise<string | undefined>;
export function freePort(): Promise<number>;
export function hasRedisServer(): boolean;
export function startRedisServer(extraArgs?: string[], port?: number, configFile?: string): Promise<RedisServer>;
export function findRedis(): Promise<FoundRedis>;
export function clusterOk(servers: readonly RedisServer[]): Promise<void>;
export function createCluster(servers: readonly RedisServer[], replicas?: number): Promise<void>;
export function infoField(port: number, section: string, field: string): Promise<string | undefined>;
export function clusterNodeArgs(i: number, dir: string): string[];
