// Package schema compiles a namespace's JSON Schema and checks namespace
// documents against it. The client checks every candidate snapshot or change
// set before it swaps it in, and holdfast server and the reference server
// check every publish, with the same code and so the same verdicts.
//
// A namespace document is the whole namespace: its keys are the document's
// properties, each value a generic JSON value. The schema speaks about the
// keys with "properties", "patternProperties", "additionalProperties",
// "required" and so on:
//
//	s, err := schema.Compile([]byte(`{
//		"properties": {"retry-timeout-ms": {"type": "integer", "minimum": 1}},
//		"required": ["retry-timeout-ms"]
//	}`))
//	if err != nil {
//		// errors.Is(err, schema.ErrInvalidSchema); keep the old schema
//	}
//	err = s.ValidateValues(rawValues) // map[string]json.RawMessage
//	var ve *schema.ValidationError
//	if errors.As(err, &ve) {
//		for _, f := range ve.Failures {
//			log.Printf("%s: %s", f.Pointer, f.Message)
//		}
//	}
//
// # Compiling
//
// Compile reads draft 2020-12 unless the schema's "$schema" names another
// draft the library knows (2019-09, 7, 6, 4). Format assertions are on: a
// string that does not match its "format" ("email", "date-time", "uri",
// "ipv4", "duration", ...) fails. Patterns are RE2 (no lookahead).
//
// A schema is untrusted input (it may come over the network), so Compile
// never loads anything: a $ref or $schema naming a document outside the
// schema — file:///etc/passwd, https://example.com/common.json, a relative
// "common.json" — fails to compile with an error wrapping both
// ErrInvalidSchema and ErrExternalRef. References inside the document
// ("#/$defs/port", anchors, an embedded $id) and to the built-in draft
// meta-schemas work.
//
// # Validating
//
// A compiled *Schema is immutable and safe for concurrent use; compile once
// and validate as often as needed. DecodeValues decodes raw values with
// json.Decoder.UseNumber, so large integers and decimals reach "maximum",
// "multipleOf" and "const" exactly. Validate and ValidateValues return nil
// or a *ValidationError that lists every failure — not only the first —
// each with the JSON pointer (RFC 6901) of the failing value: the key
// "db/primary/host" is "/db~1primary~1host", the key "a~b" is "/a~0b", and
// "" is the namespace as a whole (say, a missing required key). Failures
// are sorted and deduplicated, so the message is stable.
//
// # Errors
//
//   - ErrInvalidSchema: Compile refused the schema; nothing was compiled.
//     A caller keeps whatever schema it had.
//   - ErrExternalRef: the schema refers to a document outside itself (also
//     ErrInvalidSchema).
//   - ErrValidation, matched by *ValidationError: the document does not
//     conform. The client rejects the candidate whole and keeps serving its
//     last good; the server answers 422.
//   - ErrInvalidValue: a raw value is not one valid JSON value.
//
// A nil *Schema accepts every document.
package schema
