/** A short description of a bad option value for error messages (never the whole value). */
export function describe(value: unknown): string {
  if (typeof value === 'string') {
    return JSON.stringify(value.length > 60 ? `${value.slice(0, 60)}…` : value);
  }
  if (value === null || typeof value !== 'object') {
    return String(value);
  }
  return Array.isArray(value) ? 'an array' : 'an object';
}
