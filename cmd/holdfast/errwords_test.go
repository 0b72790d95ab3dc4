package main

import (
	"strconv"
	"strings"
	"testing"
)

// TestNotFoundInAnOperatorsWords: holdfast server says a namespace or a
// revision it does not hold in an operator's words ("namespace "NS" not
// found"), not in those of the code that looked.
func TestNotFoundInAnOperatorsWords(t *testing.T) {
	hs := start(t, "server", "-memory", "-addr", "127.0.0.1:0", "-log-format", "json")
	url := hs.stderr.waitFor(t, "serving", hs.done)["url"].(string)
	rev := revisionOf(t, mustRun(t, "publish", "-server", url, "-o", "json", "ok.ns", "a=1"))
	future := strconv.FormatInt(rev+1_000_000, 10)
	for _, c := range []struct {
		want string
		args []string
	}{
		{`not_found (HTTP 404): namespace "nosuch.ns" not found` + "\n", []string{"status", "nosuch.ns"}},
		{`not_found (HTTP 404): namespace "nosuch.ns" not found` + "\n", []string{"history", "nosuch.ns"}},
		{`not_found (HTTP 404): namespace "nosuch.ns" not found` + "\n", []string{"get", "nosuch.ns"}},
		{`not_found (HTTP 404): namespace "nosuch.ns": no content at revision 1 (not published yet then, or never)` + "\n", []string{"get", "-revision", "1", "nosuch.ns"}},
		{`not_found (HTTP 404): namespace "ok.ns": revision ` + future + ` is above the store's head` + "\n", []string{"get", "-revision", future, "ok.ns"}},
		{`not_found (HTTP 404): namespace "ok.ns": no revision committed at or before 2020-01-01T00:00:00Z` + "\n", []string{"get", "-at", "2020-01-01T00:00:00Z", "ok.ns"}},
		{`not_found (HTTP 404): namespace "nosuch.ns" not found` + "\n", []string{"rollout start", "-stages", "100", "nosuch.ns", "a=1"}},
	} {
		args := append(append(strings.Fields(c.args[0]), "-server", url), c.args[1:]...)
		errOut := mustFail(t, exitFail, c.want, args...)
		if want := "holdfast " + c.args[0] + ": " + c.want; errOut != want {
			t.Errorf("%q: stderr %q, want %q", args, errOut, want)
		}
	}
}
