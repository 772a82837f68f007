// The Python <-> JS protocol, read from the payload (`meta.protocol`, built once in
// pallas_viz/render/payload.py): op codes, column types, cell flags, the layout of an event
// row, limits. Nothing here repeats a Python constant.

export const PROTOCOL_VERSION = 2;

/** `meta.protocol`, checked. */
export function protocolOf(meta) {
  const p = meta && meta.protocol;
  if (!p) throw new Error("this payload has no protocol description (meta.protocol)");
  if (p.version !== PROTOCOL_VERSION) {
    throw new Error(`payload protocol ${p.version}, this front end reads ${PROTOCOL_VERSION}: rebuild the widget (cd js && npm run build)`);
  }
  return p;
}

/** Name -> code (its index) for a protocol list such as `ops`. */
export function codes(list) {
  const out = {};
  list.forEach((name, i) => { out[name] = i; });
  return out;
}

/** Field name -> position in an event row. */
export function rowFields(p) {
  return codes(p.event_row);
}

/** An event row (array) as an object keyed by the protocol's field names. */
export function rowObject(p, row) {
  const o = {};
  p.event_row.forEach((k, i) => { o[k] = row[i]; });
  return o;
}
