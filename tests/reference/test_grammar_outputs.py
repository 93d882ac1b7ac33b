#!/usr/bin/python3
"""Grammar-constrained decoding end to end (`dspark generate --json-schema / --grammar-file`, stories260K).

1. Validity: for hand-written schemas (formats, enum, const, anyOf / oneOf, type arrays, $defs with
   recursion, prefixItems, min/max items and lengths, optional properties) and 300 seeded random
   ones, `dspark generate --temp 1 --seed S --json-schema F -n 400` is sampled (two seeds each for
   the hand-written ones) and every output is checked with ajv + ajv-formats (tests/node/
   validate_json.mjs, draft 2020-12): an output that ended by stop (EOS, which the grammar allows
   only when the JSON is complete) must be valid JSON matching its schema. An output cut by the
   token budget cannot be complete; the whitespace-tight grammar and bounded numbers let most finish,
   and the test requires that at least 80% of all outputs ended by stop (they are not validated).
2. A GBNF grammar (--grammar-file) whose language is also written here as a Python regex: every
   sampled output that ended by stop matches it in full.
3. Lossless under speculation, greedy: for several schemas and grammars, --temp 0 gives exactly the
   same tokens with --spec none, --spec ngram and --spec dspark (the bigram drafter of
   test_spec_sampling.py, which drafts plausible chains, and a fresh init-drafter drafter).
4. --json-schema with an unsupported keyword fails naming it; a GBNF syntax error fails with its
   line:column.
"""

import json
import os
import random
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import llama_ref  # noqa: E402
import test_spec_sampling  # noqa: E402  (its bigram drafter)

NODE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "node")
BUDGET = 400
N_RANDOM = 300
PROMPT = "Once upon a time"

FIXED = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"},
                                      "pet": {"enum": ["cat", "dog", 3, None]}, "d": {"type": "string", "format": "date"}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "object", "properties": {"t": {"type": "string", "format": "time"}, "dt": {"type": "string", "format": "date-time"},
                                      "id": {"type": "string", "format": "uuid"}}, "required": ["t", "dt", "id"]},
    {"type": "array", "items": {"type": ["string", "null"], "maxLength": 4}, "minItems": 2, "maxItems": 4},
    {"type": "array", "prefixItems": [{"type": "integer"}, {"const": "x"}], "items": False},
    {"type": "array", "prefixItems": [{"type": "boolean"}], "items": {"type": "number"}, "maxItems": 3},
    {"anyOf": [{"type": "integer"}, {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]}]},
    {"oneOf": [{"type": "string", "maxLength": 3}, {"type": "null"}]},
    {"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
                                                         "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
                        "required": ["v", "next"]}}, "$ref": "#/$defs/node"},
    {"definitions": {"leaf": {"type": "string", "minLength": 1, "maxLength": 2}},
     "type": "object", "properties": {"l": {"$ref": "#/definitions/leaf"}, "m": {"type": "array", "items": {"$ref": "#/definitions/leaf"}, "maxItems": 2}},
     "required": ["l"], "title": "annotated", "description": "ignored annotations"},
    {"type": "object"},
    {"type": "object", "properties": {"k": {"const": {"nested": [1, 2, "three"]}}}, "required": ["k"]},
    {"type": "string", "minLength": 3, "maxLength": 5},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}}},
]


def random_schema(rng, depth=0):
    """A random schema of the supported subset (bounded strings mostly, so outputs can finish)."""
    kinds = ["string", "integer", "number", "boolean", "null", "enum", "const", "typearray"]
    if depth < 2:
        kinds += ["object", "object", "array", "anyOf"]
    k = rng.choice(kinds)
    if k == "string":
        s = {"type": "string"}
        r = rng.random()
        if r < 0.15:
            s["format"] = rng.choice(["date", "time", "date-time", "uuid"])
        elif r < 0.9:
            s["maxLength"] = rng.randint(1, 12)
            if rng.random() < 0.4:
                s["minLength"] = rng.randint(0, s["maxLength"])
        return s
    if k in ("integer", "number", "boolean", "null"):
        return {"type": k}
    if k == "enum":
        pool = ["a", "b c", "d\"e", "ü", 1, 2.5, -3, True, None, "line\nbreak"]
        return {"enum": rng.sample(pool, rng.randint(1, 4))}
    if k == "const":
        return {"const": rng.choice(["x", 42, False, None, [1, "y"], {"z": 0}])}
    if k == "typearray":
        return {"type": rng.sample(["string", "integer", "boolean", "null"], 2), "maxLength": 6}
    if k == "anyOf":
        return {"anyOf": [random_schema(rng, depth + 1) for _ in range(rng.randint(2, 3))]}
    if k == "array":
        s = {"type": "array", "items": random_schema(rng, depth + 1)}
        s["minItems"] = rng.randint(0, 2)
        s["maxItems"] = s["minItems"] + rng.randint(0, 3)
        return s
    n = rng.randint(1, 4)
    props = {f"p{i}_{rng.choice(['id', 'name', 'x', 'é'])}": random_schema(rng, depth + 1) for i in range(n)}
    s = {"type": "object", "properties": props, "required": [p for p in props if rng.random() < 0.6]}
    if rng.random() < 0.5:
        s["additionalProperties"] = False
    return s


def generate(tmp, model, flag, path, seed, temp, extra=()):
    out = common.run([common.tool("dspark"), "generate", "-m", model, "-p", PROMPT, "-n", str(BUDGET), "--temp",
                      str(temp), "--seed", str(seed), flag, path, "--json", *extra])
    return json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])


def main():
    if not shutil.which("node") or not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "ajv-formats")):
        common.fail("node and tests/node/node_modules (npm install in tests/node) are needed")
    chk = common.Checker("grammar_outputs")
    model = common.stories_model()
    tmp = os.path.join(common.tmp_dir(), "grammar_outputs")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)

    # 1. validity against ajv
    rng = random.Random(20261202)
    schemas = [(s, seed) for s in FIXED for seed in (1, 2)] + [(random_schema(rng), 100 + i) for i in range(N_RANDOM)]
    items, finish = [], []
    for i, (schema, seed) in enumerate(schemas):
        path = os.path.join(tmp, f"s{i}.json")
        with open(path, "w") as f:
            json.dump(schema, f)
        r = generate(tmp, model, "--json-schema", path, seed, 1.0)
        finish.append(r["finish_reason"])
        items.append({"schema": schema, "text": r["text"]})
    with open(os.path.join(tmp, "items.json"), "w") as f:
        json.dump(items, f)
    res = json.loads(subprocess.run(["node", os.path.join(NODE_DIR, "validate_json.mjs"), os.path.join(tmp, "items.json")],
                                    capture_output=True, text=True, check=True, timeout=300).stdout)
    stopped = [i for i, f in enumerate(finish) if f == "stop"]
    bad = [i for i in stopped if not res[i]["valid"]]
    for i in bad[:10]:
        print(f"   invalid: schema {json.dumps(items[i]['schema'])}\n      text {items[i]['text']!r}: {res[i]['error']}")
    chk.equal("outputs that ended by stop and fail ajv", len(bad), 0)
    share = len(stopped) / len(items)
    print(f"   {len(items)} outputs, {len(stopped)} ended by stop ({100 * share:.1f}%), all validated by ajv")
    chk.equal(f"at least 80% of outputs end by stop ({100 * share:.1f}%)", share >= 0.8, True)
    # outputs cut by the budget are prefixes of valid JSON: never a stop, and never valid + stop mismatch
    chk.equal("finish reasons are stop or length", set(finish) <= {"stop", "length"}, True)

    # 2. a GBNF grammar against its regex
    gbnf = ('root ::= name ("," name){0,3} "."\n'
            'name ::= [A-Z] [a-z]{1,8} # a capitalized word\n')
    lang = re.compile(r"[A-Z][a-z]{1,8}(?:,[A-Z][a-z]{1,8}){0,3}\.")
    gpath = os.path.join(tmp, "names.gbnf")
    with open(gpath, "w") as f:
        f.write(gbnf)
    n_match = 0
    for seed in range(20):
        r = generate(tmp, model, "--grammar-file", gpath, seed, 1.0)
        if r["finish_reason"] == "stop":
            ok = lang.fullmatch(r["text"]) is not None
            n_match += ok
            chk.equal(f"grammar output {r['text']!r} matches the language", ok, True)
    chk.equal("most grammar outputs ended by stop", n_match >= 15, True)

    # 3. greedy: identical tokens with and without speculation
    ref = llama_ref.load_gguf(model)
    bigram = test_spec_sampling.make_drafter(ref, model, "vanilla_bigram", os.path.join(tmp, "bigram"))
    fresh = os.path.join(tmp, "fresh")
    common.run([common.tool("dspark"), "init-drafter", "-m", model, "-o", fresh, "--layers", "2"])
    cases = [("--json-schema", os.path.join(tmp, f"s{i}.json")) for i in (0, 2, 4, 7, 10, 20, 30)] + [("--grammar-file", gpath)]
    for flag, path in cases:
        base = generate(tmp, model, flag, path, 0, 0, ("--spec", "none"))
        for extra in (("--spec", "ngram"), ("--spec", "ngram", "--draft-max", "3"), ("--spec", "dspark", "-d", bigram),
                      ("--spec", "dspark", "-d", fresh), ("--spec", "dspark", "-d", bigram, "--draft-max", "2")):
            got = generate(tmp, model, flag, path, 0, 0, extra)
            chk.equal(f"greedy {flag} {os.path.basename(path)} {' '.join(extra[:2])}: tokens as --spec none",
                      got["tokens"], base["tokens"])
            if "dspark" in extra and "bigram" in extra[-1] and got["rounds"] >= len(got["tokens"]) and len(got["tokens"]) > 8:
                print(f"   note: no draft accepted for {path} with the bigram drafter")

    # 4. errors
    bad_schema = os.path.join(tmp, "bad.json")
    with open(bad_schema, "w") as f:
        json.dump({"type": "string", "pattern": "^a+$"}, f)
    bad_gbnf = os.path.join(tmp, "bad.gbnf")
    with open(bad_gbnf, "w") as f:
        f.write('root ::= "a"\nitem ::= ( "b" | "c"\n')
    for path, flag, want in ((bad_schema, "--json-schema", "keyword 'pattern' is not supported"),
                             (bad_gbnf, "--grammar-file", "grammar 2:10: unclosed '('")):
        p = subprocess.run([common.tool("dspark"), "generate", "-m", model, "-p", PROMPT, flag, path],
                           capture_output=True, text=True, timeout=60)
        chk.equal(f"{flag} {os.path.basename(path)}: exit status 1", p.returncode, 1)
        chk.equal(f"{flag} {os.path.basename(path)}: stderr names the problem ({p.stderr.strip()!r})", want in p.stderr, True)
    chk.finish()


if __name__ == "__main__":
    main()
