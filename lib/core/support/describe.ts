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

/** Makes text from Redis safe for one log line: control characters escaped, length capped. */
export function printable(text: string, limit = 2_000): string {
  let escaped = '';
  for (const character of text.length > limit ? text.slice(0, limit) : text) {
    const code = character.charCodeAt(0);
    escaped += code < 32 || code === 127 ? `\\x${code.toString(16).padStart(2, '0')}` : character;
  }
  return text.length > limit ? `${escaped}… (${text.length - limit} more characters)` : escaped;
}
