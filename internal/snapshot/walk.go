package snapshot

import (
	"fmt"

	"github.com/holdfast-dev/holdfast/internal/jsonscan"
)

// BuildJSON walks a snapshot's values in place with the project's JSON
// scanner (package jsonscan): it keeps keys and JSON texts as substrings
// of one copy of the object instead of a map of copies, and accepts
// exactly what encoding/json accepts (json.Valid): any byte but '"', '\\'
// and the control characters inside strings (UTF-8 is not checked, as
// there), and at most jsonscan.MaxDepth nested arrays and objects.

// eachMember walks obj, one JSON object (white space around it allowed),
// and calls fn with each member's key, decoded, and the JSON text of its
// value; both are substrings of obj where the key has no escapes. It
// checks the whole text as it goes: fn sees only members of a valid
// prefix, and eachMember's error says where the text stops being JSON.
// fn may be nil, to count and check only. It returns the number of
// members.
func eachMember(obj string, fn func(key, raw string) error) (int, error) {
	i := jsonscan.SkipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return 0, fmt.Errorf("not a JSON object: %w", jsonscan.ErrorAt(obj, i, "'{'"))
	}
	n := 0
	i = jsonscan.SkipSpace(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return 0, trailing(obj, i+1)
	}
	for {
		if i >= len(obj) || obj[i] != '"' {
			return n, jsonscan.ErrorAt(obj, i, "a string key")
		}
		kend, plain, err := jsonscan.ScanString(obj, i)
		if err != nil {
			return n, err
		}
		key := obj[i+1 : kend-1]
		if !plain && fn != nil {
			key = jsonscan.Unquote(obj[i:kend])
		}
		i = jsonscan.SkipSpace(obj, kend)
		if i >= len(obj) || obj[i] != ':' {
			return n, jsonscan.ErrorAt(obj, i, "':'")
		}
		i = jsonscan.SkipSpace(obj, i+1)
		vstart := i
		if i, err = jsonscan.SkipValue(obj, i, 1); err != nil {
			return n, err
		}
		if fn != nil {
			if err := fn(key, obj[vstart:i]); err != nil {
				return n, err
			}
		}
		n++
		i = jsonscan.SkipSpace(obj, i)
		if i < len(obj) && obj[i] == ',' {
			i = jsonscan.SkipSpace(obj, i+1)
			continue
		}
		if i < len(obj) && obj[i] == '}' {
			return n, trailing(obj, i+1)
		}
		return n, jsonscan.ErrorAt(obj, i, "',' or '}'")
	}
}

// trailing fails when anything but white space follows the end of a value.
func trailing(s string, i int) error {
	if i = jsonscan.SkipSpace(s, i); i < len(s) {
		return jsonscan.ErrorAt(s, i, "the end after the object")
	}
	return nil
}
