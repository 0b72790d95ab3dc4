package schema_test

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/holdfast-dev/holdfast/schema"
)

func Example() {
	s, err := schema.Compile([]byte(`{
		"properties": {
			"retry-timeout-ms": {"type": "integer", "minimum": 1},
			"db/primary/host": {"type": "string", "format": "hostname"},
			"owner": {"type": "string", "format": "email"}
		},
		"required": ["retry-timeout-ms"]
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}

	err = s.ValidateValues(map[string]json.RawMessage{
		"retry-timeout-ms": json.RawMessage(`50`),
		"db/primary/host":  json.RawMessage(`"db1.internal"`),
	})
	fmt.Println("good:", err)

	err = s.ValidateValues(map[string]json.RawMessage{
		"retry-timeout-ms": json.RawMessage(`0`),
		"db/primary/host":  json.RawMessage(`42`),
		"owner":            json.RawMessage(`"nobody"`),
	})
	var ve *schema.ValidationError
	if errors.As(err, &ve) {
		for _, f := range ve.Failures {
			fmt.Printf("%s: %s\n", f.Pointer, f.Message)
		}
	}
	fmt.Println(errors.Is(err, schema.ErrValidation))
	// Output:
	// good: <nil>
	// /db~1primary~1host: expected string, but got number
	// /owner: 'nobody' is not valid 'email'
	// /retry-timeout-ms: must be >= 1 but found 0
	// true
}

func ExampleCompile_externalRef() {
	_, err := schema.Compile([]byte(`{"$ref": "file:///etc/passwd"}`))
	fmt.Println(errors.Is(err, schema.ErrInvalidSchema), errors.Is(err, schema.ErrExternalRef))
	fmt.Println(err)
	// Output:
	// true true
	// schema: invalid schema: reference to "file:///etc/passwd" is outside the schema document; external references are not loaded
}

func ExampleValidationError_Error() {
	s, _ := schema.Compile([]byte(`{"additionalProperties": {"type": "string"}, "required": ["name"]}`))
	fmt.Println(s.ValidateValues(map[string]json.RawMessage{"a~b": json.RawMessage(`1`)}))
	// Output:
	// schema: document does not conform to the schema: 2 failures: at "" (the whole document): missing properties: 'name'; at "/a~0b": expected string, but got number
}
