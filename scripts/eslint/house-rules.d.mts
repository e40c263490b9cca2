// Types of house-rules.mjs, for the tests that import it.
import type { Rule } from 'eslint';

export declare const LAYERS: Readonly<Record<string, number>>;
export declare const ALLOWED_SIDEWAYS: Readonly<Record<string, string>>;
export declare const REGISTRIES: readonly string[];
export declare const CONNECTION_OWNERS: Readonly<Record<string, string>>;
declare const plugin: {
  readonly meta: { readonly name: string };
  readonly rules: Readonly<
    Record<
      | 'imports-downward'
      | 'adapters-above-redis'
      | 'registries-in-store'
      | 'no-spread-then-fields'
      | 'no-long-lived-tables',
      Rule.RuleModule
    >
  >;
};
export default plugin;
