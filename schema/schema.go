package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// Errors. Test them with errors.Is; a *ValidationError also matches
// ErrValidation.
var (
	// ErrInvalidSchema is wrapped by every error of Compile: the schema is
	// not JSON, not a JSON object, not a valid JSON Schema, or refers to a
	// document outside itself. Nothing was compiled; a caller that had a
	// schema keeps using it.
	ErrInvalidSchema = errors.New("schema: invalid schema")

	// ErrExternalRef is wrapped (together with ErrInvalidSchema) by a
	// Compile error caused by a $ref, $schema or other reference to a
	// document outside the schema itself. Nothing is ever loaded: no file is
	// read and no network request is made.
	ErrExternalRef = errors.New("schema: external reference refused")

	// ErrValidation is matched by every *ValidationError: the document does
	// not conform to the schema.
	ErrValidation = errors.New("schema: document does not conform to the schema")

	// ErrInvalidValue is wrapped by DecodeValues (and ValidateValues) when a
	// raw value is not one valid JSON value.
	ErrInvalidValue = errors.New("schema: invalid JSON value")
)

// The bounds of a schema document, checked before it is decoded: the
// library compiles recursively, in time that grows with the square of the
// schema objects and with their depth (a schema 3,000 deep took 6.6 s;
// 25,000 objects in chains 58 deep, 256 KiB, took 50 s; 2,000 objects take
// 0.1-0.2 s). Real schemas nest a few levels of "properties" and "items",
// each two levels of JSON: 64 is room for 32 of them.
const (
	// MaxSchemaBytes bounds a schema document's size.
	MaxSchemaBytes = 256 << 10
	// MaxSchemaDepth bounds its nesting: arrays and objects within one
	// another, the document itself being the first.
	MaxSchemaDepth = 64
	// MaxSchemaObjects bounds how many JSON objects it holds (each
	// schema is one, and so is each object of an "enum" or "const").
	MaxSchemaObjects = 2000
)

// resourceURL is the URL the schema document is registered under. It is
// absolute (so the library never turns it into a file:// URL of the working
// directory) and has no '#' (the library panics on one). Relative
// references resolve against it, and so are refused as external unless the
// schema's own $id / anchors name them.
const resourceURL = "holdfast-schema:///namespace.json"

// Schema is a compiled namespace schema. It is immutable and safe for
// concurrent use; compile it once and validate any number of documents.
//
// A nil *Schema accepts every document.
type Schema struct {
	compiled *jsonschema.Schema
}

// Compile compiles a namespace's JSON Schema. The schema must be one JSON
// object. Without "$schema" it is read as draft 2020-12. Format assertions
// are on: a "format" such as "email", "date-time", "uri" or "ipv4" that a
// string does not match is a failure, not an annotation.
//
// Every reference to a document outside this one is refused: a $ref (or
// $schema) to file://, http://, https:// or any other URL that the schema
// does not itself define with $id fails with ErrExternalRef, and nothing is
// read or fetched. References to the JSON Schema meta-schemas, which are
// built in, are allowed.
//
// A document of more than MaxSchemaBytes, or nested more than
// MaxSchemaDepth deep, is refused before anything is decoded.
//
// Every error wraps ErrInvalidSchema. Compile never panics.
func Compile(schemaJSON []byte) (*Schema, error) {
	if len(schemaJSON) > MaxSchemaBytes {
		return nil, fmt.Errorf("%w: %d bytes, more than the %d a schema may have", ErrInvalidSchema, len(schemaJSON), MaxSchemaBytes)
	}
	d, objects, at := nesting(schemaJSON, MaxSchemaDepth, MaxSchemaObjects)
	if d > MaxSchemaDepth {
		return nil, fmt.Errorf("%w: nested more than %d arrays and objects deep (at byte %d)", ErrInvalidSchema, MaxSchemaDepth, at)
	}
	if objects > MaxSchemaObjects {
		return nil, fmt.Errorf("%w: more than %d objects (at byte %d)", ErrInvalidSchema, MaxSchemaObjects, at)
	}
	doc, err := decodeOne(schemaJSON)
	if err != nil {
		return nil, fmt.Errorf("%w: not valid JSON: %v", ErrInvalidSchema, err)
	}
	if _, ok := doc.(map[string]any); !ok {
		return nil, fmt.Errorf("%w: must be a JSON object, got %s", ErrInvalidSchema, jsonKind(doc))
	}
	if err := checkLibraryKeywords(doc, ""); err != nil {
		return nil, err
	}

	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	c.AssertFormat = true
	c.LoadURL = refuseLoad
	// The document was checked above; AddResource decodes it again, with
	// UseNumber, into the library's own value.
	if err := c.AddResource(resourceURL, bytes.NewReader(schemaJSON)); err != nil {
		return nil, compileError(err)
	}
	compiled, err := c.Compile(resourceURL)
	if err != nil {
		return nil, compileError(err)
	}
	return &Schema{compiled: compiled}, nil
}

// nesting returns how deep arrays and objects nest in the JSON text b and
// how many objects it holds, up to the first past maxDepth or maxObjects,
// with the offset where it got there. It reads only brackets and strings
// (a text that is not JSON is decoding's to refuse), in one pass, without
// recursion.
func nesting(b []byte, maxDepth, maxObjects int) (depth, objects, at int) {
	var cur int
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case '{', '[':
			if b[i] == '{' {
				if objects++; objects > maxObjects {
					return depth, objects, i
				}
			}
			if cur++; cur > depth {
				if depth = cur; depth > maxDepth {
					return depth, objects, i
				}
			}
		case '}', ']':
			cur--
		}
	}
	return depth, objects, 0
}

// checkLibraryKeywords refuses what the library would panic on rather than
// report. It has one non-standard keyword, "regexProperties", which it
// reads as a boolean in every schema object without checking the type
// (drafts 2019-09 and 2020-12 do not declare it). Values of the keywords
// that hold data, not schemas, are not looked into.
func checkLibraryKeywords(v any, ptr string) error {
	switch v := v.(type) {
	case map[string]any:
		if rp, ok := v["regexProperties"]; ok {
			if _, ok := rp.(bool); !ok {
				return fmt.Errorf("%w: at %s: regexProperties must be a boolean, got %s",
					ErrInvalidSchema, displayPointer(ptr+"/regexProperties"), jsonKind(rp))
			}
		}
		for k, sub := range v {
			switch k {
			case "const", "enum", "default", "examples":
				continue
			}
			if err := checkLibraryKeywords(sub, ptr+"/"+escapeToken(k)); err != nil {
				return err
			}
		}
	case []any:
		for i, sub := range v {
			if err := checkLibraryKeywords(sub, ptr+"/"+strconv.Itoa(i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// escapeToken escapes one JSON pointer token (RFC 6901).
func escapeToken(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// refuseLoad is the compiler's loader: every document that is not the
// schema itself or a built-in meta-schema is refused, never read.
func refuseLoad(u string) (io.ReadCloser, error) {
	return nil, &externalRefError{url: u}
}

type externalRefError struct{ url string }

func (e *externalRefError) Error() string {
	return fmt.Sprintf("reference to %q is outside the schema document; external references are not loaded", e.url)
}

func (e *externalRefError) Is(target error) bool { return target == ErrExternalRef }

// compileError turns a library error into one that wraps ErrInvalidSchema
// (and the cause, so errors.Is(err, ErrExternalRef) works) with a message
// that does not mention the internal resource URL.
func compileError(err error) error {
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		// The schema does not conform to its meta-schema: list every
		// failure, with its pointer into the schema.
		fs := collect(ve)
		parts := make([]string, len(fs))
		for i, f := range fs {
			parts[i] = fmt.Sprintf("at %s: %s", displayPointer(f.Pointer), f.Message)
		}
		return &compileErr{msg: "does not conform to the JSON Schema meta-schema: " + strings.Join(parts, "; "), cause: err}
	}
	var ext *externalRefError
	if errors.As(err, &ext) {
		return &compileErr{msg: ext.Error(), cause: err}
	}
	msg := err.Error()
	var se *jsonschema.SchemaError
	if errors.As(err, &se) && se.Err != nil {
		msg = se.Err.Error()
	}
	msg = strings.TrimPrefix(msg, "jsonschema: ")
	msg = strings.ReplaceAll(msg, resourceURL, "schema")
	return &compileErr{msg: msg, cause: err}
}

type compileErr struct {
	msg   string
	cause error
}

func (e *compileErr) Error() string { return ErrInvalidSchema.Error() + ": " + e.msg }

func (e *compileErr) Unwrap() []error { return []error{ErrInvalidSchema, e.cause} }

// Validate checks a namespace document — the whole namespace, key → generic
// JSON value as DecodeValues makes it — against the schema. The document is
// the instance: the schema's "properties", "additionalProperties",
// "required" and so on speak about the namespace's keys.
//
// It returns nil, or a *ValidationError listing every failure. A document
// holding a Go value that is not a generic JSON value (map[string]any,
// []any, string, json.Number, float64, bool, nil, or a Go integer) gives
// another error.
func (s *Schema) Validate(doc map[string]any) error {
	if s == nil || s.compiled == nil {
		return nil
	}
	if doc == nil {
		doc = map[string]any{}
	}
	err := s.compiled.Validate(doc)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		return &ValidationError{Failures: collect(ve)}
	}
	return fmt.Errorf("schema: cannot validate: %s", strings.TrimPrefix(err.Error(), "jsonschema: "))
}

// ValidateValues decodes raw JSON values as DecodeValues does and validates
// the result: the check a client makes before applying a namespace and the
// server makes before accepting a publish. A value that is not valid JSON
// gives an error wrapping ErrInvalidValue; a document that fails the schema
// gives a *ValidationError.
func (s *Schema) ValidateValues(values map[string]json.RawMessage) error {
	doc, err := DecodeValues(values)
	if err != nil {
		return err
	}
	return s.Validate(doc)
}

// DecodeValues decodes raw JSON values into a document Validate accepts.
// Numbers are decoded as json.Number, so that no precision is lost before
// "multipleOf", "maximum" or "const" sees them. A value that is empty, not
// JSON, or followed by anything but white space gives an error wrapping
// ErrInvalidValue and naming the first such key (in sorted order).
func DecodeValues(values map[string]json.RawMessage) (map[string]any, error) {
	return DecodeSeq(maps.All(values), len(values))
}

// DecodeSeq is DecodeValues for values held in another form than a map,
// such as a cache.Snapshot's (its RawAll method), so that checking a
// namespace needs no map of its raw values first. sizeHint is the number
// of values, or 0 when unknown. A key yielded twice keeps its last value.
func DecodeSeq(values iter.Seq2[string, json.RawMessage], sizeHint int) (map[string]any, error) {
	doc := make(map[string]any, max(sizeHint, 0))
	var (
		bad    int
		badKey string
		badErr error
	)
	for k, raw := range values {
		v, err := decodeOne(raw)
		if err != nil {
			if bad == 0 || k < badKey {
				badKey, badErr = k, err
			}
			bad++
			continue
		}
		doc[k] = v
	}
	if bad > 0 {
		more := ""
		if bad > 1 {
			more = fmt.Sprintf(" (and %d more keys)", bad-1)
		}
		return nil, fmt.Errorf("%w: key %q%s: %v", ErrInvalidValue, badKey, more, badErr)
	}
	return doc, nil
}

// decodeOne decodes exactly one JSON value, with UseNumber. The common
// config values — a plain string, a number, true, false, null — take a fast
// path that gives exactly what the decoder would; anything else goes
// through json.Decoder.
func decodeOne(raw []byte) (any, error) {
	if v, ok := decodeSimple(raw); ok {
		return v, nil
	}
	return decodeSlow(raw)
}

func decodeSimple(raw []byte) (any, bool) {
	b := bytes.Trim(raw, " \t\r\n")
	if len(b) == 0 {
		return nil, false
	}
	switch b[0] {
	case '"':
		if len(b) < 2 || b[len(b)-1] != '"' {
			return nil, false
		}
		body := b[1 : len(b)-1]
		for _, c := range body {
			// Escapes, control characters and the quote itself need the
			// decoder; so does anything that is not ASCII, whose UTF-8 the
			// decoder checks (and repairs).
			if c == '\\' || c == '"' || c < 0x20 || c >= utf8.RuneSelf {
				return nil, false
			}
		}
		return string(body), true
	case 't':
		return true, string(b) == "true"
	case 'f':
		return false, string(b) == "false"
	case 'n':
		return nil, string(b) == "null"
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		if !isNumber(b) {
			return nil, false
		}
		return json.Number(b), true
	}
	return nil, false
}

// isNumber reports whether b is exactly one JSON number (RFC 8259).
func isNumber(b []byte) bool {
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == start {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == start {
			return false
		}
	}
	return i == len(b)
}

func decodeSlow(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		if err == io.EOF {
			return nil, errors.New("empty value")
		}
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the JSON value")
	}
	return v, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	}
	return "an object"
}

// ValidationError is a document that does not conform to its schema. It
// lists every failure, sorted by pointer and then message, without
// duplicates. It matches ErrValidation with errors.Is.
type ValidationError struct {
	Failures []Failure
}

// Failure is one reason a document does not conform.
type Failure struct {
	// Pointer is the RFC 6901 JSON pointer of the failing value in the
	// document: "" for the document (the namespace) itself, "/retry-ms" for
	// a key, "/db~1primary~1host" for the key "db/primary/host" ('~' is
	// written "~0", '/' is written "~1"), "/hosts/2" inside a value.
	//
	// One known imprecision of the underlying library: a failure of the
	// value under an empty key "" is reported at the pointer of the object
	// holding it (e.g. "" rather than "/"), as if the object itself failed.
	Pointer string `json:"pointer"`
	// Message says what is wrong, e.g. "expected integer, but got string".
	Message string `json:"message"`
	// Keyword is the JSON pointer of the schema keyword that failed, along
	// the path the validation took (through any $ref), e.g.
	// "/properties/port/maximum". For information; Pointer and Message are
	// what identify a failure.
	Keyword string `json:"keyword,omitempty"`
}

func (f Failure) String() string {
	return displayPointer(f.Pointer) + ": " + f.Message
}

// Error lists every failure with its pointer in one message.
func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString("schema: document does not conform to the schema: ")
	switch n := len(e.Failures); n {
	case 0:
		b.WriteString("no failure recorded")
		return b.String()
	case 1:
		b.WriteString("1 failure: ")
	default:
		b.WriteString(strconv.Itoa(n))
		b.WriteString(" failures: ")
	}
	for i, f := range e.Failures {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString("at ")
		b.WriteString(f.String())
	}
	return b.String()
}

// Is reports whether target is ErrValidation.
func (e *ValidationError) Is(target error) bool { return target == ErrValidation }

// displayPointer shows a pointer in messages; the root pointer "" would be
// invisible.
func displayPointer(p string) string {
	if p == "" {
		return `"" (the whole document)`
	}
	return strconv.Quote(p)
}

// collect returns the leaf failures of a library error: the nodes with no
// causes (inner nodes only say "doesn't validate with ..."), sorted and
// deduplicated.
func collect(ve *jsonschema.ValidationError) []Failure {
	var fs []Failure
	var walk func(*jsonschema.ValidationError)
	walk = func(v *jsonschema.ValidationError) {
		if len(v.Causes) == 0 {
			fs = append(fs, Failure{
				Pointer: instancePointer(v.InstanceLocation),
				Message: message(v),
				Keyword: v.KeywordLocation,
			})
			return
		}
		for _, c := range v.Causes {
			walk(c)
		}
	}
	walk(ve)
	slices.SortFunc(fs, func(a, b Failure) int {
		if c := strings.Compare(a.Pointer, b.Pointer); c != 0 {
			return c
		}
		if c := strings.Compare(a.Message, b.Message); c != 0 {
			return c
		}
		return strings.Compare(a.Keyword, b.Keyword)
	})
	return slices.CompactFunc(fs, func(a, b Failure) bool {
		return a.Pointer == b.Pointer && a.Message == b.Message
	})
}

// message is the library's message for a failure, made clearer where it is
// terse.
func message(v *jsonschema.ValidationError) string {
	if v.Message == "not failed" {
		return fmt.Sprintf("matches the schema it must not match (%q)", v.KeywordLocation)
	}
	return v.Message
}

// instancePointer turns the library's instance location into a plain JSON
// pointer. The library escapes each token as a JSON pointer token ("~0",
// "~1") and then URL-path-escapes it ("%20" for a space); undo the second
// step only.
func instancePointer(loc string) string {
	if loc == "" || !strings.Contains(loc, "%") {
		return loc
	}
	tokens := strings.Split(loc, "/")
	for i, t := range tokens {
		if u, err := url.PathUnescape(t); err == nil {
			tokens[i] = u
		}
	}
	return strings.Join(tokens, "/")
}
