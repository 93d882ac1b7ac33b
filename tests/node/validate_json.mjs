// Validate texts against JSON schemas with ajv (+ ajv-formats): an independent reference for
// dspark's constrained decoding (tests/reference/test_grammar_outputs.py).
//   node validate_json.mjs IN.json  ->  prints [{"json": bool, "valid": bool, "error": str}, ...]
// IN.json: [{"schema": {...}, "text": "..."}, ...]
import { readFileSync } from "node:fs";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const items = JSON.parse(readFileSync(process.argv[2], "utf8"));
const out = items.map(({ schema, text }) => {
  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    return { json: false, valid: false, error: String(e) };
  }
  const ajv = new Ajv2020({ strict: false, allErrors: false });
  addFormats(ajv);
  const validate = ajv.compile(schema);
  const valid = validate(value);
  return { json: true, valid, error: valid ? "" : ajv.errorsText(validate.errors) };
});
console.log(JSON.stringify(out));
