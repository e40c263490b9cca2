import type { ResolvedClientOptions } from '../core/config/options.js';
import { createFlow } from '../core/flows/flow-creator.js';
import { resolveFlow } from '../core/flows/flow-options.js';
import type { FlowOptions, FlowReceipt } from '../core/model/flow.js';
import type { CallsWithin } from '../core/producer/call-within.js';
import type { ProducerRuntime } from '../core/producer/producer-runtime.js';

/** `RedisTaskClient.flow`: checked, then created within `enqueueTimeoutMs`, connecting first if need be. */
export async function flowWithin(
  within: CallsWithin,
  options: ResolvedClientOptions,
  given: FlowOptions,
  runtime: () => Promise<ProducerRuntime>,
): Promise<FlowReceipt> {
  const flow = resolveFlow(given, options.clientId, options.maxPayloadBytes);
  return within(
    'flow()',
    async () => createFlow((await runtime()).store, flow),
    `calling flow() again with id "${flow.id}" creates it at most once`,
  );
}
