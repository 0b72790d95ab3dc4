package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

func mustCompile(tb testing.TB, s string) *Schema {
	tb.Helper()
	sc, err := Compile([]byte(s))
	if err != nil {
		tb.Fatalf("Compile(%s): %v", s, err)
	}
	return sc
}

func raw(kv ...string) map[string]json.RawMessage {
	m := make(map[string]json.RawMessage, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = json.RawMessage(kv[i+1])
	}
	return m
}

func TestCompileInvalid(t *testing.T) {
	tests := []struct {
		name, schema string
		external     bool
		want         string // substring of the error
	}{
		{"empty", ``, false, "not valid JSON: empty value"},
		{"whitespace", " \n\t", false, "not valid JSON: empty value"},
		{"truncated", `{"type":`, false, "not valid JSON"},
		{"garbage", `nope`, false, "not valid JSON"},
		{"trailing data", `{} {}`, false, "unexpected data after the JSON value"},
		{"array", `[{"type":"string"}]`, false, "must be a JSON object, got an array"},
		{"true", `true`, false, "must be a JSON object, got a boolean"},
		{"string", `"x"`, false, "must be a JSON object, got a string"},
		{"number", `12`, false, "must be a JSON object, got a number"},
		{"null", `null`, false, "must be a JSON object, got null"},
		{"bad type", `{"type":"nope"}`, false, `at "/type": value must be one of`},
		{"nested bad keyword", `{"properties":{"a":{"minLength":-1}}}`, false, `at "/properties/a/minLength": must be >= 0 but found -1`},
		{"bad regex", `{"pattern":"(?=x)"}`, false, `at "/pattern"`},
		{"bad pattern property", `{"patternProperties":{"(":{}}}`, false, `/patternProperties`},
		{"draft4 bad pattern property", `{"$schema":"http://json-schema.org/draft-04/schema#","patternProperties":{"(?=x)":{}}}`, false, "not valid regex"},
		{"missing local ref", `{"$ref":"#/$defs/missing"}`, false, "not found"},
		{"ref loop", `{"$ref":"#"}`, false, "infinite loop"},
		{"fragment in $id", `{"$id":"http://x/y#frag"}`, false, `at "/$id"`},
		{"regexProperties not a boolean", `{"properties":{"a/b":{"regexProperties":null}}}`, false, `at "/properties/a~1b/regexProperties": regexProperties must be a boolean, got null`},
		{"regexProperties in 2020-12 root", `{"regexProperties":"yes"}`, false, `must be a boolean, got a string`},
		{"$schema not a string", `{"$schema":5}`, false, `invalid $schema`},
		{"file ref", `{"$ref":"file:///etc/passwd"}`, true, `"file:///etc/passwd"`},
		{"file ref in a property", `{"properties":{"a":{"$ref":"file:///etc/passwd#/x"}}}`, true, `"file:///etc/passwd"`},
		{"http ref", `{"$ref":"http://example.invalid/s.json"}`, true, `"http://example.invalid/s.json"`},
		{"https ref", `{"$ref":"https://example.invalid/s.json#/$defs/a"}`, true, `"https://example.invalid/s.json"`},
		{"relative ref", `{"$ref":"common.json"}`, true, "is outside the schema document"},
		{"relative ref against $id", `{"$id":"file:///etc/","$ref":"passwd"}`, true, `"file:///etc/passwd"`},
		{"urn ref", `{"$ref":"urn:example:other"}`, true, `"urn:example:other"`},
		{"external $schema", `{"$schema":"http://example.invalid/meta"}`, true, `"http://example.invalid/meta"`},
		{"external $dynamicRef", `{"$dynamicRef":"http://example.invalid/x#meta"}`, true, "outside the schema document"},
		{"unknown meta-schema url on json-schema.org", `{"$ref":"https://json-schema.org/draft/2099-01/schema"}`, true, "outside the schema document"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Compile([]byte(tt.schema))
			if err == nil {
				t.Fatalf("Compile(%s) = %v, want an error", tt.schema, s)
			}
			if s != nil {
				t.Errorf("Compile returned a schema with its error")
			}
			if !errors.Is(err, ErrInvalidSchema) {
				t.Errorf("errors.Is(%v, ErrInvalidSchema) = false", err)
			}
			if got := errors.Is(err, ErrExternalRef); got != tt.external {
				t.Errorf("errors.Is(%v, ErrExternalRef) = %v, want %v", err, got, tt.external)
			}
			if errors.Is(err, ErrValidation) {
				t.Errorf("a compile error matches ErrValidation: %v", err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "schema: invalid schema: ") {
				t.Errorf("error %q lacks the package prefix", msg)
			}
			if !strings.Contains(msg, tt.want) {
				t.Errorf("error %q does not contain %q", msg, tt.want)
			}
			if strings.Contains(msg, resourceURL) {
				t.Errorf("error %q shows the internal resource URL", msg)
			}
		})
	}
}

// TestCompileNeverReadsFiles points $ref at a file that holds a valid schema:
// if the library read it, Compile would succeed.
func TestCompileNeverReadsFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "common.json")
	if err := os.WriteFile(path, []byte(`{"type":"string"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	loaders := len(jsonschema.Loaders)
	for _, s := range []string{
		fmt.Sprintf(`{"$ref":"file://%s"}`, filepath.ToSlash(path)),
		fmt.Sprintf(`{"properties":{"a":{"$ref":"file://%s#"}}}`, filepath.ToSlash(path)),
		fmt.Sprintf(`{"$id":"file://%s/","$ref":"common.json"}`, filepath.ToSlash(dir)),
		`{"$ref":"` + filepath.ToSlash(path) + `"}`,
	} {
		_, err := Compile([]byte(s))
		if !errors.Is(err, ErrExternalRef) || !errors.Is(err, ErrInvalidSchema) {
			t.Errorf("Compile(%s) = %v, want ErrExternalRef", s, err)
		}
	}
	// Relative references resolve against our own URL, never the working
	// directory: a file next to the test must not be found either.
	t.Chdir(dir)
	if _, err := Compile([]byte(`{"$ref":"common.json"}`)); !errors.Is(err, ErrExternalRef) {
		t.Errorf("relative $ref: %v, want ErrExternalRef", err)
	}
	if len(jsonschema.Loaders) != loaders || jsonschema.Loaders["file"] == nil {
		t.Errorf("the library's global Loaders were changed")
	}
}

func TestCompileNeverFetches(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/schema+json")
		fmt.Fprint(w, `{"type":"string"}`)
	}))
	defer srv.Close()
	for _, s := range []string{
		`{"$ref":"` + srv.URL + `/s.json"}`,
		`{"$schema":"` + srv.URL + `/meta"}`,
		`{"$id":"` + srv.URL + `/root.json","$ref":"other.json"}`,
		`{"items":{"$ref":"` + srv.URL + `/s.json#/$defs/x"}}`,
	} {
		if _, err := Compile([]byte(s)); !errors.Is(err, ErrExternalRef) {
			t.Errorf("Compile(%s) = %v, want ErrExternalRef", s, err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the server got %d requests, want 0", n)
	}
}

// Data keywords may hold anything, including the library's own keyword.
func TestCompileDataKeywordsNotChecked(t *testing.T) {
	s := mustCompile(t, `{"properties":{"a":{"const":{"regexProperties":1},"enum":[{"regexProperties":1}],"default":{"regexProperties":1},"examples":[{"regexProperties":1}]}},"regexProperties":true}`)
	if err := s.ValidateValues(raw("a", `{"regexProperties":1}`)); err != nil {
		t.Error(err)
	}
}

func TestCompileInternalRefs(t *testing.T) {
	tests := []struct {
		name, schema string
		good, bad    string // a value for key "a"
	}{
		{"$defs", `{"$defs":{"port":{"type":"integer","maximum":65535}},"properties":{"a":{"$ref":"#/$defs/port"}}}`, `80`, `70000`},
		{"anchor", `{"$defs":{"p":{"$anchor":"port","type":"integer"}},"properties":{"a":{"$ref":"#port"}}}`, `80`, `"80"`},
		{"escaped pointer", `{"$defs":{"a/b~c":{"type":"string"}},"properties":{"a":{"$ref":"#/$defs/a~1b~0c"}}}`, `"x"`, `1`},
		{"embedded $id", `{"$id":"https://example.invalid/root.json","$defs":{"c":{"$id":"common.json","type":"boolean"}},"properties":{"a":{"$ref":"common.json"}}}`, `true`, `1`},
		{"absolute self ref", `{"$id":"https://example.invalid/root.json","$defs":{"s":{"type":"string"}},"properties":{"a":{"$ref":"https://example.invalid/root.json#/$defs/s"}}}`, `"x"`, `1`},
		{"recursive", `{"$defs":{"tree":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/$defs/tree"}}}}},"properties":{"a":{"$ref":"#/$defs/tree"}}}`, `{"kids":[{"kids":[]}]}`, `{"kids":[{"kids":[1]}]}`},
		{"meta-schema ref", `{"properties":{"a":{"$ref":"https://json-schema.org/draft/2020-12/schema"}}}`, `{"type":"string"}`, `{"type":"nope"}`},
		{"explicit 2020-12", `{"$schema":"https://json-schema.org/draft/2020-12/schema","properties":{"a":{"type":"integer"}}}`, `1`, `1.5`},
		{"draft-07", `{"$schema":"http://json-schema.org/draft-07/schema#","properties":{"a":{"type":"integer"}}}`, `1`, `1.5`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustCompile(t, tt.schema)
			if err := s.ValidateValues(raw("a", tt.good)); err != nil {
				t.Errorf("good value %s: %v", tt.good, err)
			}
			err := s.ValidateValues(raw("a", tt.bad))
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("bad value %s: %v, want a *ValidationError", tt.bad, err)
			}
			for _, f := range ve.Failures {
				if f.Pointer != "/a" && !strings.HasPrefix(f.Pointer, "/a/") {
					t.Errorf("failure %+v outside /a", f)
				}
			}
		})
	}
}

func TestValidate(t *testing.T) {
	const sch = `{
		"properties": {
			"retry-timeout-ms": {"type": "integer", "minimum": 1, "maximum": 60000},
			"mode": {"enum": ["fast", "safe"]},
			"hosts": {"type": "array", "items": {"type": "string", "format": "hostname"}, "maxItems": 3},
			"db": {"type": "object", "properties": {"port": {"type": "integer"}}, "required": ["port"], "additionalProperties": false}
		},
		"required": ["retry-timeout-ms"],
		"additionalProperties": {"type": "string"}
	}`
	s := mustCompile(t, sch)
	tests := []struct {
		name   string
		values map[string]json.RawMessage
		want   []Failure // Pointer and Message; nil = valid
	}{
		{"minimal", raw("retry-timeout-ms", `50`), nil},
		{"full", raw("retry-timeout-ms", `50`, "mode", `"safe"`, "hosts", `["a.example","b"]`, "db", `{"port":5432}`, "other", `"x"`), nil},
		{"integer written as 5e1", raw("retry-timeout-ms", `5e1`), nil},
		{"integer written as 50.0", raw("retry-timeout-ms", `50.0`), nil},
		{"empty namespace", raw(), []Failure{{"", "missing properties: 'retry-timeout-ms'", ""}}},
		{"wrong type", raw("retry-timeout-ms", `"50"`), []Failure{{"/retry-timeout-ms", "expected integer, but got string", ""}}},
		{"fraction", raw("retry-timeout-ms", `1.5`), []Failure{{"/retry-timeout-ms", "expected integer, but got number", ""}}},
		{"too big", raw("retry-timeout-ms", `60001`), []Failure{{"/retry-timeout-ms", "must be <= 60000 but found 60001", ""}}},
		{"null", raw("retry-timeout-ms", `null`), []Failure{{"/retry-timeout-ms", "expected integer, but got null", ""}}},
		{"enum", raw("retry-timeout-ms", `1`, "mode", `"slow"`), []Failure{{"/mode", `value must be one of "fast", "safe"`, ""}}},
		{"additional property type", raw("retry-timeout-ms", `1`, "x", `true`), []Failure{{"/x", "expected string, but got boolean", ""}}},
		{"inside an array", raw("retry-timeout-ms", `1`, "hosts", `["ok", 7, "-bad-"]`), []Failure{
			{"/hosts/1", "expected string, but got number", ""},
			{"/hosts/2", "'-bad-' is not valid 'hostname'", ""},
		}},
		{"inside an object", raw("retry-timeout-ms", `1`, "db", `{"user":"x"}`), []Failure{
			{"/db", "additionalProperties 'user' not allowed", ""},
			{"/db", "missing properties: 'port'", ""},
		}},
		{"every failure at once", raw("mode", `1`, "hosts", `[1,2,3,4]`, "x", `{}`, "y", `[]`), []Failure{
			{"", "missing properties: 'retry-timeout-ms'", ""},
			{"/hosts", "maximum 3 items required, but found 4 items", ""},
			{"/hosts/0", "expected string, but got number", ""},
			{"/hosts/1", "expected string, but got number", ""},
			{"/hosts/2", "expected string, but got number", ""},
			{"/hosts/3", "expected string, but got number", ""},
			{"/mode", `value must be one of "fast", "safe"`, ""},
			{"/x", "expected string, but got object", ""},
			{"/y", "expected string, but got array", ""},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.ValidateValues(tt.values)
			checkFailures(t, err, tt.want)

			// Validate on a decoded document says the same.
			doc, derr := DecodeValues(tt.values)
			if derr != nil {
				t.Fatal(derr)
			}
			err2 := s.Validate(doc)
			if fmt.Sprint(err) != fmt.Sprint(err2) {
				t.Errorf("Validate = %v, ValidateValues = %v", err2, err)
			}
		})
	}
}

// checkFailures compares err with the wanted failures (Pointer and Message
// only), and checks the error's shape.
func checkFailures(t *testing.T, err error, want []Failure) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("got %v, want nil", err)
		}
		return
	}
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("got %v (%T), want a *ValidationError", err, err)
	}
	if !errors.Is(err, ErrValidation) {
		t.Errorf("errors.Is(err, ErrValidation) = false")
	}
	if errors.Is(err, ErrInvalidSchema) {
		t.Errorf("a validation error matches ErrInvalidSchema")
	}
	got := make([]Failure, len(ve.Failures))
	for i, f := range ve.Failures {
		if f.Keyword == "" {
			t.Errorf("failure %+v has no keyword", f)
		}
		got[i] = Failure{Pointer: f.Pointer, Message: f.Message}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("failures:\n got  %q\n want %q", got, want)
	}
	msg := err.Error()
	for _, f := range want {
		if !strings.Contains(msg, f.Message) || !strings.Contains(msg, fmt.Sprintf("%q", f.Pointer)) {
			t.Errorf("message %q lacks failure %q", msg, f)
		}
	}
	if n := len(want); n > 1 && !strings.Contains(msg, fmt.Sprintf("%d failures", n)) {
		t.Errorf("message %q does not count %d failures", msg, n)
	}
}

// unescapePointer turns a JSON pointer back into its tokens (RFC 6901).
func unescapePointer(p string) []string {
	if p == "" {
		return nil
	}
	toks := strings.Split(p[1:], "/")
	for i, t := range toks {
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return toks
}

func TestPointerEscaping(t *testing.T) {
	keys := map[string]string{
		"db/primary/host":  "/db~1primary~1host",
		"a~b":              "/a~0b",
		"~1":               "/~01",
		"/~/":              "/~1~0~1",
		"with space":       "/with space",
		"percent%20kept":   "/percent%20kept",
		"100%":             "/100%",
		"ünï/cödé":         "/ünï~1cödé",
		"quote\"back\\":    "/quote\"back\\",
		"question?hash#&=": "/question?hash#&=",
		"tab\there":        "/tab\there",
	}
	s := mustCompile(t, `{"additionalProperties":{"type":"integer"}}`)
	values := map[string]json.RawMessage{}
	for k := range keys {
		values[k] = json.RawMessage(`"not an integer"`)
	}
	err := s.ValidateValues(values)
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("got %v", err)
	}
	got := map[string]bool{}
	for _, f := range ve.Failures {
		got[f.Pointer] = true
		if want := "expected integer, but got string"; f.Message != want {
			t.Errorf("pointer %q: message %q, want %q", f.Pointer, f.Message, want)
		}
		toks := unescapePointer(f.Pointer)
		if len(toks) != 1 {
			t.Errorf("pointer %q has %d tokens, want 1", f.Pointer, len(toks))
			continue
		}
		if _, ok := keys[toks[0]]; !ok {
			t.Errorf("pointer %q names key %q, which is not in the document", f.Pointer, toks[0])
		}
	}
	for k, p := range keys {
		if !got[p] {
			t.Errorf("key %q: no failure with pointer %q (got %v)", k, p, ve.Failures)
		}
	}
	if len(ve.Failures) != len(keys) {
		t.Errorf("%d failures, want %d: %v", len(ve.Failures), len(keys), ve.Failures)
	}

	// Nested: key "a/b" → index 1 → property "c~d".
	s = mustCompile(t, `{"additionalProperties":{"type":"array","items":{"additionalProperties":{"type":"string"}}}}`)
	checkFailures(t, s.ValidateValues(raw("a/b", `[{}, {"c~d": 1, "ok": "x"}]`)), []Failure{
		{Pointer: "/a~1b/1/c~0d", Message: "expected string, but got number"},
	})
}

// The library reports a failure under the empty key at its parent's
// location. Pin that (documented on Failure.Pointer), so a library fix that
// changes it is noticed.
func TestEmptyKeyPointer(t *testing.T) {
	s := mustCompile(t, `{"additionalProperties":{"type":"integer"}}`)
	checkFailures(t, s.ValidateValues(raw("", `"x"`)), []Failure{{Pointer: "", Message: "expected integer, but got string"}})
}

func TestFormats(t *testing.T) {
	tests := []struct {
		format, good, bad string
	}{
		{"email", `"ops@example.com"`, `"ops.example.com"`},
		{"date-time", `"2026-11-29T08:00:00.123Z"`, `"2026-11-29 08:00"`},
		{"date", `"2026-11-29"`, `"2026-02-30"`},
		{"ipv4", `"10.0.0.1"`, `"10.0.0.256"`},
		{"ipv6", `"::1"`, `"1:::1"`},
		{"uri", `"https://example.com/x"`, `"not a uri"`},
		{"hostname", `"db1.internal"`, `"-db"`},
		{"duration", `"PT5M"`, `"5m"`},
		{"uuid", `"2f1c0c86-3c1b-4a33-9b77-8b2c3b6bc0de"`, `"2f1c0c86"`},
		{"regex", `"^a+$"`, `"(?=a)"`},
	}
	for _, tt := range tests {
		t.Run(tt.format, func(t *testing.T) {
			s := mustCompile(t, `{"properties":{"v":{"format":"`+tt.format+`"}}}`)
			if err := s.ValidateValues(raw("v", tt.good)); err != nil {
				t.Errorf("%s: %v", tt.good, err)
			}
			checkFailures(t, s.ValidateValues(raw("v", tt.bad)), []Failure{
				{Pointer: "/v", Message: fmt.Sprintf("'%s' is not valid '%s'", strings.Trim(tt.bad, `"`), tt.format)},
			})
			// A format applies to strings only.
			if err := s.ValidateValues(raw("v", `5`)); err != nil {
				t.Errorf("number: %v", err)
			}
		})
	}
}

func TestNumbers(t *testing.T) {
	// 2^53+1 is not a float64: decoded as a float it would equal 2^53.
	s := mustCompile(t, `{"properties":{
		"big": {"type": "integer", "maximum": 9007199254740992},
		"exact": {"const": 9007199254740993},
		"step": {"multipleOf": 0.1},
		"huge": {"type": "integer"}
	}}`)
	checkFailures(t, s.ValidateValues(raw("big", `9007199254740992`)), nil)
	checkFailures(t, s.ValidateValues(raw("big", `9007199254740993`)), []Failure{
		{Pointer: "/big", Message: "must be <= 9.007199254740992e+15 but found 9007199254740993"},
	})
	checkFailures(t, s.ValidateValues(raw("exact", `9007199254740993`)), nil)
	if err := s.ValidateValues(raw("exact", `9007199254740992`)); !errors.Is(err, ErrValidation) {
		t.Errorf("const off by one: %v", err)
	}
	checkFailures(t, s.ValidateValues(raw("step", `0.3`)), nil)
	checkFailures(t, s.ValidateValues(raw("step", `0.30000000000000004`)), []Failure{
		{Pointer: "/step", Message: "0.30000000000000004 not multipleOf 0.1"},
	})
	checkFailures(t, s.ValidateValues(raw("huge", `1e400`)), nil)
	checkFailures(t, s.ValidateValues(raw("huge", `123456789012345678901234567890`)), nil)

	doc, err := DecodeValues(raw("n", `9007199254740993`, "f", `1.5`))
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := doc["n"].(json.Number); !ok || n.String() != "9007199254740993" {
		t.Errorf("DecodeValues n = %#v, want json.Number(9007199254740993)", doc["n"])
	}
	if _, ok := doc["f"].(json.Number); !ok {
		t.Errorf("DecodeValues f = %T, want json.Number", doc["f"])
	}

	// Validate also takes Go numbers a caller built by hand.
	checkFailures(t, s.Validate(map[string]any{"big": float64(1), "huge": 7, "step": int64(3)}), nil)
	checkFailures(t, s.Validate(map[string]any{"huge": 1.5}), []Failure{
		{Pointer: "/huge", Message: "expected integer, but got number"},
	})
}

func TestValidateOddInputs(t *testing.T) {
	s := mustCompile(t, `{"required":["a"]}`)
	checkFailures(t, s.Validate(nil), []Failure{{Pointer: "", Message: "missing properties: 'a'"}})

	// Not a generic JSON value: an error, but not a *ValidationError, and no panic.
	type custom struct{}
	s = mustCompile(t, `{"additionalProperties":{"type":"string"}}`)
	err := s.Validate(map[string]any{"a": custom{}})
	if err == nil {
		t.Fatal("Validate accepted a Go struct")
	}
	var ve *ValidationError
	if errors.As(err, &ve) || errors.Is(err, ErrValidation) {
		t.Errorf("a non-JSON Go value gave a validation error: %v", err)
	}
	if !strings.HasPrefix(err.Error(), "schema: ") {
		t.Errorf("error %q lacks the package prefix", err)
	}

	// A nil *Schema accepts everything.
	var none *Schema
	if err := none.Validate(map[string]any{"a": 1}); err != nil {
		t.Errorf("nil schema: %v", err)
	}
	if err := none.ValidateValues(raw("a", `1`)); err != nil {
		t.Errorf("nil schema: %v", err)
	}
	if err := none.ValidateValues(raw("a", `{`)); !errors.Is(err, ErrInvalidValue) {
		t.Errorf("nil schema, bad JSON: %v, want ErrInvalidValue", err)
	}

	// An empty schema accepts everything.
	all := mustCompile(t, `{}`)
	if err := all.ValidateValues(raw("a", `[1,{"b":null}]`)); err != nil {
		t.Errorf("empty schema: %v", err)
	}
}

func TestDecodeValues(t *testing.T) {
	doc, err := DecodeValues(raw("s", `"x"`, "n", ` 1 `, "o", `{"a":[true,null]}`, "z", "null"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"s": "x", "n": json.Number("1"), "o": map[string]any{"a": []any{true, nil}}, "z": nil}
	if fmt.Sprint(doc) != fmt.Sprint(want) {
		t.Errorf("got %#v, want %#v", doc, want)
	}
	if doc, err := DecodeValues(nil); err != nil || doc == nil || len(doc) != 0 {
		t.Errorf("DecodeValues(nil) = %#v, %v; want an empty map", doc, err)
	}

	for _, tt := range []struct {
		name   string
		values map[string]json.RawMessage
		want   string
	}{
		{"empty", raw("k", ``), `key "k": empty value`},
		{"nil", map[string]json.RawMessage{"k": nil}, `key "k": empty value`},
		{"two values", raw("k", `1 2`), `key "k": unexpected data after the JSON value`},
		{"truncated", raw("k", `{"a":`), `key "k": unexpected EOF`},
		{"garbage", raw("k", `nope`), `key "k": invalid character`},
		{"first bad key named", raw("b", `{`, "a", `[`, "c", `1`), `key "a" (and 1 more keys)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			doc, err := DecodeValues(tt.values)
			if !errors.Is(err, ErrInvalidValue) {
				t.Fatalf("got %v, %v; want ErrInvalidValue", doc, err)
			}
			if doc != nil {
				t.Errorf("doc %v returned with an error", doc)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if errors.Is(err, ErrValidation) {
				t.Errorf("a decode error matches ErrValidation")
			}
		})
	}
}

func TestFailuresSortedAndDeduplicated(t *testing.T) {
	// anyOf with two alternatives that fail the same way would report the
	// same failure twice.
	s := mustCompile(t, `{"additionalProperties":{"anyOf":[{"type":"string"},{"type":"string","minLength":1}]}}`)
	checkFailures(t, s.ValidateValues(raw("b", `1`, "a", `2`)), []Failure{
		{Pointer: "/a", Message: "expected string, but got number"},
		{Pointer: "/b", Message: "expected string, but got number"},
	})
	// Stable message, whatever the map order.
	first := s.ValidateValues(raw("b", `1`, "a", `2`, "c", `3`)).Error()
	for range 20 {
		if got := s.ValidateValues(raw("c", `3`, "a", `2`, "b", `1`)).Error(); got != first {
			t.Fatalf("message changed:\n%s\n%s", first, got)
		}
	}
}

func TestNotMessage(t *testing.T) {
	s := mustCompile(t, `{"additionalProperties":{"type":"string","not":{"pattern":"new-field"}}}`)
	err := s.ValidateValues(raw("cluster/c7", `"lb=rr;new-field=1"`))
	checkFailures(t, err, []Failure{{Pointer: "/cluster~1c7", Message: `matches the schema it must not match ("/additionalProperties/not")`}})
}

func TestValidationErrorMessage(t *testing.T) {
	e := &ValidationError{Failures: []Failure{{Pointer: "/a", Message: "bad"}}}
	if got, want := e.Error(), `schema: document does not conform to the schema: 1 failure: at "/a": bad`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	e = &ValidationError{}
	if got := e.Error(); !strings.Contains(got, "no failure recorded") {
		t.Errorf("empty: %q", got)
	}
	if !errors.Is(fmt.Errorf("apply: %w", e), ErrValidation) {
		t.Errorf("wrapped ValidationError does not match ErrValidation")
	}
	b, err := json.Marshal(Failure{Pointer: "/a", Message: "m"})
	if err != nil || string(b) != `{"pointer":"/a","message":"m"}` {
		t.Errorf("Failure JSON = %s, %v", b, err)
	}
}

// A fleet's scenario: 1,000 keys; the strict clients' schema rejects
// "new-field", every schema rejects "BAD".
func scenario(tb testing.TB) (loose, strict *Schema, values map[string]json.RawMessage) {
	tb.Helper()
	loose = mustCompile(tb, `{"additionalProperties":{"type":"string","not":{"pattern":"BAD"}}}`)
	strict = mustCompile(tb, `{"additionalProperties":{"type":"string","allOf":[{"not":{"pattern":"BAD"}},{"not":{"pattern":"new-field"}}]}}`)
	values = make(map[string]json.RawMessage, 1000)
	for i := range 1000 {
		values[fmt.Sprintf("cluster/c%d", i)] = json.RawMessage(fmt.Sprintf(`"lb=rr;endpoints=10.0.%d.%d"`, i/256, i%256))
	}
	return loose, strict, values
}

func TestScenario(t *testing.T) {
	loose, strict, values := scenario(t)
	for _, s := range []*Schema{loose, strict} {
		if err := s.ValidateValues(values); err != nil {
			t.Fatal(err)
		}
	}
	values["cluster/c42"] = json.RawMessage(`"lb=rr;new-field=1"`)
	if err := loose.ValidateValues(values); err != nil {
		t.Errorf("loose rejects new-field: %v", err)
	}
	var ve *ValidationError
	if err := strict.ValidateValues(values); !errors.As(err, &ve) || len(ve.Failures) != 1 || ve.Failures[0].Pointer != "/cluster~1c42" {
		t.Errorf("strict: %v", err)
	}
	values["cluster/c7"] = json.RawMessage(`"BAD"`)
	for _, s := range []*Schema{loose, strict} {
		if err := s.ValidateValues(values); !errors.Is(err, ErrValidation) || !strings.Contains(err.Error(), `"/cluster~1c7"`) {
			t.Errorf("BAD: %v", err)
		}
	}
}

// Many goroutines share one compiled schema (run with -race).
func TestConcurrentValidate(t *testing.T) {
	loose, strict, values := scenario(t)
	bad := make(map[string]json.RawMessage, len(values))
	for k, v := range values {
		bad[k] = v
	}
	bad["cluster/c1"] = json.RawMessage(`"new-field"`)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 2 {
				if err := loose.ValidateValues(bad); err != nil {
					t.Errorf("loose: %v", err)
				}
				err := strict.ValidateValues(bad)
				if i%2 == 0 && !errors.Is(err, ErrValidation) {
					t.Errorf("strict: %v", err)
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkValidateValues1000Keys(b *testing.B) {
	_, strict, values := scenario(b)
	b.ReportAllocs()
	for b.Loop() {
		if err := strict.ValidateValues(values); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidate1000Keys(b *testing.B) {
	_, strict, values := scenario(b)
	doc, err := DecodeValues(values)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := strict.Validate(doc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCompile(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compile([]byte(`{"additionalProperties":{"type":"string","not":{"pattern":"new-field"}}}`)); err != nil {
			b.Fatal(err)
		}
	}
}
