package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// compileSeeds are schemas that reach the library's interesting paths:
// references of every kind, drafts, formats, patterns, loops.
var compileSeeds = []string{
	``,
	`{}`,
	`true`,
	`[]`,
	`{"type":"string"}`,
	`{"type":"nope"}`,
	`{"$ref":"#"}`,
	`{"$ref":"#/$defs/a","$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}}}`,
	`{"$ref":"file:///etc/passwd"}`,
	`{"$ref":"file:///etc/passwd#/a"}`,
	`{"$ref":"http://127.0.0.1:1/x.json"}`,
	`{"$ref":"other.json#frag"}`,
	`{"$ref":"#frag"}`,
	`{"$ref":"##"}`,
	`{"$ref":"%zz"}`,
	`{"$ref":"#/%zz"}`,
	`{"$ref":"#/$defs/a/0","$defs":{"a":[1]}}`,
	`{"$ref":"urn:x#y"}`,
	`{"$id":"urn:x","$ref":"#/$defs/a","$defs":{"a":{}}}`,
	`{"$id":"http://x/y#"}`,
	`{"$id":"http://x/y#z"}`,
	`{"$id":"#a"}`,
	`{"$id":"file:///etc/","$ref":"passwd"}`,
	`{"$schema":"http://json-schema.org/draft-04/schema#","id":"#x","patternProperties":{"(":{}}}`,
	`{"$schema":"http://json-schema.org/draft-06/schema#","$ref":"#"}`,
	`{"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"a":{"$id":"#a"}}}`,
	`{"$schema":"https://json-schema.org/draft/2019-09/schema","$recursiveRef":"#","$recursiveAnchor":true}`,
	`{"$schema":"https://json-schema.org/schema"}`,
	`{"$schema":"x#y"}`,
	`{"$schema":"#"}`,
	`{"$schema":5}`,
	`{"$dynamicRef":"#meta","$dynamicAnchor":"meta"}`,
	`{"$vocabulary":{"http://x":true}}`,
	`{"properties":{"a":{"$schema":"http://example.invalid/m"}}}`,
	`{"pattern":"(?=x)"}`,
	`{"patternProperties":{"^a/b~c$":{"format":"email"}}}`,
	`{"format":"date-time","minLength":1e400,"maxItems":-0}`,
	`{"multipleOf":0,"maximum":1e400}`,
	`{"enum":[],"const":null,"contentEncoding":"base64","contentMediaType":"application/json"}`,
	`{"properties":{"a":{"$ref":"https://json-schema.org/draft/2020-12/schema"}}}`,
	`{"$ref":"https://json-schema.org/draft/2020-12/meta/core"}`,
	`{"$defs":{"c":{"$id":"common.json"}},"$ref":"common.json#/x"}`,
	`{"allOf":[{"$ref":"#/allOf/0"}]}`,
	`{"additionalProperties":{"type":"string","not":{"pattern":"new-field"}}}`,
}

// FuzzCompile: Compile never panics, never loads anything, and every error
// wraps ErrInvalidSchema. A schema that compiles validates documents
// without panicking.
func FuzzCompile(f *testing.F) {
	for _, s := range compileSeeds {
		f.Add([]byte(s))
	}
	docs := []map[string]json.RawMessage{
		{},
		{"a": json.RawMessage(`1`), "b/c": json.RawMessage(`"x@y"`)},
		{"a": json.RawMessage(`{"a":[null,true,1.5,"2026-01-01T00:00:00Z"]}`)},
	}
	f.Fuzz(func(t *testing.T, schemaJSON []byte) {
		s, err := Compile(schemaJSON)
		if err != nil {
			if s != nil {
				t.Fatalf("Compile returned a schema and %v", err)
			}
			if !errors.Is(err, ErrInvalidSchema) {
				t.Fatalf("error %v does not wrap ErrInvalidSchema", err)
			}
			if !strings.HasPrefix(err.Error(), "schema: invalid schema: ") {
				t.Fatalf("error %q lacks the prefix", err)
			}
			return
		}
		for _, d := range docs {
			checkValidateResult(t, s.ValidateValues(d))
		}
	})
}

// FuzzValidate: whatever the document, Validate never panics and returns
// nil or a well-formed *ValidationError.
func FuzzValidate(f *testing.F) {
	seeds := []struct{ schema, key, value string }{
		{`{"additionalProperties":{"type":"string","not":{"pattern":"new-field"}}}`, "cluster/c1", `"lb=rr;new-field"`},
		{`{"properties":{"a~b":{"type":"integer","maximum":10}}}`, "a~b", `11`},
		{`{"additionalProperties":{"format":"email"}}`, "x", `"nope"`},
		{`{"additionalProperties":{"uniqueItems":true}}`, "x", `[1,1.0,{"a":[]},{"a":[]}]`},
		{`{"additionalProperties":{"multipleOf":0.01}}`, "x", `1e-400`},
		{`{"$defs":{"t":{"items":{"$ref":"#/$defs/t"}}},"additionalProperties":{"$ref":"#/$defs/t"}}`, "t", `[[[[[[1]]]]]]`},
		{`{"propertyNames":{"maxLength":3}}`, "long/key", `null`},
		{`{"additionalProperties":{"unevaluatedProperties":false,"properties":{"a":{}}}}`, "", `{"a":1,"b":2}`},
		{`{"additionalProperties":{"contains":{"const":1},"minContains":2}}`, "x", `[1]`},
		{`{"additionalProperties":{"dependentRequired":{"a":["b"]}}}`, "x", `{"a":1}`},
		{`{"additionalProperties":{"format":"date-time"}}`, "x", `"2026-13-01T00:00:00Z"`},
		{`{}`, "x", `{`},
	}
	for _, s := range seeds {
		f.Add(s.schema, s.key, []byte(s.value))
	}
	f.Fuzz(func(t *testing.T, schemaJSON, key string, value []byte) {
		s, err := Compile([]byte(schemaJSON))
		if err != nil {
			return
		}
		err = s.ValidateValues(map[string]json.RawMessage{key: value, "fixed": json.RawMessage(`"v"`)})
		if errors.Is(err, ErrInvalidValue) {
			if json.Valid(value) {
				t.Fatalf("valid JSON %q refused: %v", value, err)
			}
			return
		}
		if !json.Valid(value) {
			t.Fatalf("invalid JSON %q accepted (err %v)", value, err)
		}
		checkValidateResult(t, err)
	})
}

func checkValidateResult(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var ve *ValidationError
	if !errors.As(err, &ve) {
		// Only a validation loop may fail otherwise.
		if !strings.Contains(err.Error(), "infinite loop") {
			t.Fatalf("unexpected error %T: %v", err, err)
		}
		return
	}
	if !errors.Is(err, ErrValidation) {
		t.Fatalf("ValidationError does not match ErrValidation")
	}
	if len(ve.Failures) == 0 {
		t.Fatalf("ValidationError without failures")
	}
	for i, fl := range ve.Failures {
		if fl.Pointer != "" && !strings.HasPrefix(fl.Pointer, "/") {
			t.Fatalf("pointer %q is not a JSON pointer", fl.Pointer)
		}
		if fl.Message == "" {
			t.Fatalf("failure %d has no message", i)
		}
		if i > 0 {
			p := ve.Failures[i-1]
			if p.Pointer > fl.Pointer || (p.Pointer == fl.Pointer && p.Message >= fl.Message) {
				t.Fatalf("failures not sorted and unique: %q then %q", p, fl)
			}
		}
	}
	_ = err.Error()
}

// TestCompileKeywordSweep compiles every keyword with values of every JSON
// type under every draft: random bytes rarely reach the library's type
// assertions, this reaches all of them. Compile must not panic, and a schema
// that compiles must validate without panicking.
func TestCompileKeywordSweep(t *testing.T) {
	drafts := []string{
		"",
		`"$schema":"http://json-schema.org/draft-04/schema#",`,
		`"$schema":"http://json-schema.org/draft-06/schema#",`,
		`"$schema":"http://json-schema.org/draft-07/schema#",`,
		`"$schema":"https://json-schema.org/draft/2019-09/schema",`,
		`"$schema":"https://json-schema.org/draft/2020-12/schema",`,
	}
	keywords := []string{
		"$id", "id", "$anchor", "$dynamicAnchor", "$recursiveAnchor", "$ref", "$dynamicRef", "$recursiveRef",
		"$defs", "definitions", "$vocabulary", "$comment", "$schema",
		"type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
		"maxLength", "minLength", "pattern", "format", "contentEncoding", "contentMediaType", "contentSchema",
		"items", "prefixItems", "additionalItems", "unevaluatedItems", "contains", "maxContains", "minContains",
		"maxItems", "minItems", "uniqueItems",
		"properties", "patternProperties", "additionalProperties", "unevaluatedProperties", "propertyNames",
		"maxProperties", "minProperties", "required", "dependentRequired", "dependentSchemas", "dependencies",
		"allOf", "anyOf", "oneOf", "not", "if", "then", "else", "regexProperties",
		"title", "description", "default", "deprecated", "readOnly", "writeOnly", "examples",
	}
	values := []string{
		`null`, `true`, `false`, `0`, `-1`, `1.5`, `1e400`, `""`, `"#"`, `"##"`, `"a#b"`, `"("`,
		`"file:///etc/passwd"`, `"%zz"`, `"#/%zz"`, `"#/$defs/x/0"`, `[]`, `[1]`, `["a","a"]`, `[{}]`, `[true]`,
		`{}`, `{"(":{}}`, `{"a":1}`, `{"a":["b"]}`, `{"a":{"$ref":"#"}}`, `{"a":true}`,
		`{"$ref":"file:///etc/passwd"}`, `{"$id":"#x"}`,
	}
	docs := []map[string]json.RawMessage{
		{"a": json.RawMessage(`1`)},
		{"a": json.RawMessage(`[1,1,{"a":"b"}]`), "(": json.RawMessage(`"x"`)},
		{"a": json.RawMessage(`{"a":1,"b":[]}`)},
	}
	n := 0
	for _, d := range drafts {
		for _, k := range keywords {
			for _, v := range values {
				wraps := []string{"%s", `"properties":{"a":{%s}}`, `"additionalProperties":{%s}`}
				if testing.Short() {
					wraps = wraps[:2]
				}
				for _, wrap := range wraps {
					body := strings.Replace(wrap, "%s", `"`+k+`":`+v, 1)
					s, p, err := tryCompile([]byte("{" + d + body + "}"))
					if p != nil {
						t.Errorf("Compile(%s) panicked: %v", "{"+d+body+"}", p)
						continue
					}
					if err != nil {
						if !errors.Is(err, ErrInvalidSchema) {
							t.Fatalf("%s: %v", body, err)
						}
						continue
					}
					n++
					for _, doc := range docs {
						checkValidateResult(t, s.ValidateValues(doc))
					}
				}
			}
		}
	}
	t.Logf("%d of %d schemas compiled", n, len(drafts)*len(keywords)*len(values)*3)
}

// tryCompile reports a panic of Compile as a value, so that a sweep lists
// every panicking input instead of stopping at the first.
func tryCompile(b []byte) (s *Schema, p any, err error) {
	defer func() { p = recover() }()
	s, err = Compile(b)
	return s, nil, err
}

// FuzzDecodeValue: the fast path of DecodeValues gives exactly what
// json.Decoder with UseNumber gives, or defers to it.
func FuzzDecodeValue(f *testing.F) {
	for _, s := range []string{
		`"x"`, ` "x" `, `""`, `"a\"b"`, `"\u00e9"`, `"é"`, "\"\xff\"", "\"a\tb\"", `"`, `"""`, `"a"b"`,
		`0`, `-0`, `01`, `-`, `1.`, `.5`, `1.5e+10`, `1E-3`, `1e`, `-1.0e400`, `+1`, `0x10`,
		`true`, `truex`, `false`, `null`, `nul`, ` null`, "\ttrue\n", `{}`, `[1]`, ``, ` `, `1 2`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		fast, ok := decodeSimple(raw)
		slow, err := decodeSlow(raw)
		if !ok {
			return
		}
		if err != nil {
			t.Fatalf("fast path accepted %q, decoder: %v", raw, err)
		}
		if fmt.Sprintf("%#v", fast) != fmt.Sprintf("%#v", slow) {
			t.Fatalf("%q: fast %#v, decoder %#v", raw, fast, slow)
		}
	})
}
