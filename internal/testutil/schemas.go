package testutil

import (
	"fmt"
	"strings"

	"github.com/holdfast-dev/holdfast/schema"
)

// DeepSchema is a namespace schema whose property k nests depth "items"
// schemas: past schema.MaxSchemaDepth it is refused before compiling;
// unbounded, the compilation's time grows steeply with depth (3,000: 6.6 s).
func DeepSchema(depth int) string {
	return `{"type":"object","properties":{"k":` + strings.Repeat(`{"items":`, depth) + `{}` + strings.Repeat(`}`, depth) + `}}`
}

// CostlySchema is about the costliest schema within package schema's
// bounds: as many objects as it may hold, in chains as deep as they may
// go (properties k0, k1…, each an array of arrays… of numbers).
func CostlySchema() string {
	chain := schema.MaxSchemaDepth - 4 // the document, its properties, the property, then the chain
	one := strings.Repeat(`{"items":`, chain) + `{"type":"number"}` + strings.Repeat(`}`, chain)
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{`)
	for i := range (schema.MaxSchemaObjects - 1) / (chain + 1) {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%d":%s`, i, one)
	}
	b.WriteString(`}}`)
	return b.String()
}
