package cache

import "strings"

// Stand-ins until the fix: the current code has no cross-process lock and no
// superseded error.
const haveFlock = true

func isSuperseded(err error) bool { return strings.Contains(err.Error(), "superseded") }
